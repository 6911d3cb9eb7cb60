// `cordon-exec`: `cordon exec` in a small binary. A harness runs one per tool call, and the full
// `cordon` loads some twenty libraries (TLS, archives, FUSE) before main: several milliseconds
// that this program, linking only what the exec client uses, does not spend.
#include <cstdio>
#include <string>
#include <vector>

#include "launcher/commands.h"
#include "launcher/diagnostics.h"
#include "launcher/run_options.h"
#include "launcher/session/session.h"

using namespace cordon::launcher;

namespace {

constexpr const char* kUsage =
    "Usage: cordon-exec [-e NAME=VALUE]... [--state-dir DIR] ID|NAME [--] COMMAND [ARGS...]\n"
    "Runs COMMAND in a running detached session (`cordon run --detach`), exactly as\n"
    "`cordon exec` does (see `cordon exec --help`), from a smaller binary that starts faster.\n"
    "Exit status: the command's; 128+N if it died of signal N; 125 if cordon failed;\n"
    "126 not executable; 127 not found.\n";

}  // namespace

int main(int argc, char** argv) {
  ExecOptions opts;
  std::string state_dir;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if ((a == "-e" || a == "--env" || a == "--state-dir") && i + 1 < argc) {
      (a == "--state-dir" ? state_dir : opts.env.emplace_back()) = argv[++i];
    } else if (a.rfind("--env=", 0) == 0) {
      opts.env.push_back(a.substr(6));
    } else if (a.rfind("--state-dir=", 0) == 0) {
      state_dir = a.substr(12);
    } else if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "cordon-exec: unknown option %s\n%s", a.c_str(), kUsage);
      return kExitCordonFailed;
    } else {
      opts.session = a;
      ++i;
      break;
    }
  }
  if (i < argc && std::string(argv[i]) == "--") {
    ++i;
  }
  opts.argv.assign(argv + i, argv + argc);
  if (opts.session.empty() || opts.argv.empty()) {
    std::fputs(kUsage, stderr);
    return kExitCordonFailed;
  }
  if (!state_dir.empty()) {
    if (auto s = use_state_dir(state_dir); !s.ok()) {
      return fail(s.error().to_string());
    }
  }
  return exec_command(opts);
}
