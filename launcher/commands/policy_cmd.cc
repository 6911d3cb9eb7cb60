// `cordon policy default | check FILE | explain [FILE] | import srt|codex FILE`, the first three
// optionally with --agent NAME.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "base/unique_fd.h"
#include "launcher/commands.h"
#include "launcher/diagnostics.h"
#include "launcher/identity.h"
#include "launcher/run_options.h"
#include "launcher/sandbox/landlock.h"
#include "launcher/sandbox/seccomp.h"
#include "policy/import/import.h"
#include "policy/loader.h"
#include "policy/presets.h"
#include "policy/serialize.h"

namespace cordon::launcher {
namespace {

// The policy as `cordon run` reads it: "~" as the invoking user's home (under sudo not root's),
// extending `agent`'s preset.
policy::Policy load(const std::string& file, const std::string& agent) {
  if (!agent.empty() && policy::find_preset(agent) == nullptr) {
    throw policy::PolicyError("", "--agent: " + policy::unknown_preset(agent));
  }
  policy::LoadOptions lo;
  lo.home = invoking_home(HostFacts::current());
  lo.agent = agent;
  if (file.empty()) {
    return policy::default_policy(lo);
  }
  // A sandbox-runtime or Codex settings file is read as `cordon run --policy` reads it.
  std::optional<std::string> imported;
  policy::Policy p = policy::import::load_policy_or_import(file, lo, &imported);
  if (imported) {
    say(*imported);
  }
  return p;
}

// Writes `text` to `path` (created 0644, or truncated), or to stdout for "" and "-".
Status write_out(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text << std::flush;
    return std::cout ? Status{} : Status(Error{"cannot write to stdout", EIO, ""});
  }
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644));
  if (!fd) {
    return sys_error("cannot create " + path);
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return sys_error("cannot write " + path);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd.release()) != 0) {
    return sys_error("cannot write " + path);
  }
  return {};
}

// What `cordon run` checks beyond the loader before anything starts, so that a policy `check`
// passes is one `run` accepts: syscall names libseccomp knows, exec_allow paths Landlock can
// express. (What depends on the host, such as paths that exist, is said by `run`.)
Status validate_for_run(const policy::Policy& p) {
  if (auto s = compile_seccomp(p.process.seccomp, {p.process.nested_sandbox, true}); !s.ok()) {
    return std::move(s).error().with_context("seccomp");
  }
  if (auto e = exec_allow_paths(p.process, "/workspace"); !e.ok()) {
    return std::move(e).error();
  }
  return {};
}

}  // namespace

int policy_default_command() {
  std::cout << policy::default_policy_text();
  return 0;
}

int policy_check_command(const std::string& file, const std::string& agent) {
  try {
    policy::Policy p = load(file, agent);
    if (auto s = validate_for_run(p); !s.ok()) {
      say(file + ": " + s.error().to_string());
      return 1;
    }
  } catch (const policy::PolicyError& e) {
    say(e.what());
    return 1;
  }
  std::cout << file << ": ok\n";
  return 0;
}

int policy_explain_command(const std::string& file, const std::string& agent) {
  try {
    policy::Policy p = load(file, agent);
    if (auto s = validate_for_run(p); !s.ok()) {
      say(file + ": " + s.error().to_string());
      return 1;
    }
    std::cout << policy::explain(p);
  } catch (const policy::PolicyError& e) {
    say(e.what());
    return 1;
  }
  return 0;
}

int policy_import_command(const PolicyImportOptions& o) {
  using policy::import::Format;
  Format f;
  if (o.format == "srt") {
    f = Format::Srt;
  } else if (o.format == "codex") {
    f = Format::Codex;
  } else {
    return fail_in("policy import",
                   "\"" + o.format +
                       "\" is not a format cordon imports (accepted: srt for "
                       "sandbox-runtime's settings, codex for Codex's config.toml)");
  }
  if (f == Format::Srt && !o.profile.empty()) {
    return fail_in("policy import",
                   "--profile selects a profile of a Codex config.toml; sandbox-runtime's "
                   "settings have none");
  }
  policy::import::ImportResult r;
  try {
    policy::LoadOptions lo;
    lo.home = invoking_home(HostFacts::current());
    r = policy::import::import_file(f, o.file, o.profile, lo);
  } catch (const policy::PolicyError& e) {
    say(e.what());
    return 1;
  }
  const auto name = policy::import::format_name(f);
  if (auto s = write_out(o.output, policy::import::render(r, o.file, name)); !s.ok()) {
    return fail_in("policy import", s.error().to_string());
  }
  const std::string rep = policy::import::report(r, o.file, name);
  if (o.report.empty()) {
    std::cerr << rep << std::flush;
  } else if (auto s = write_out(o.report, rep); !s.ok()) {
    return fail_in("policy import", s.error().to_string());
  }
  return 0;
}

}  // namespace cordon::launcher
