// cordon-fs: the copy-on-write workspace view of a cordon session (see fusefs/daemon.h).
#include <cstdio>

#include "base/hardening.h"
#include "fusefs/daemon.h"

int main(int argc, char** argv) {
  // First: no other process of our uid may take our fds (pidfd_getfd) or memory, and the fds we
  // inherited by number (the ready pipe, events.jsonl) reach nothing we run (fusermount3).
  for (auto st : {cordon::make_undumpable(), cordon::cloexec_from(3)}) {
    if (!st.ok()) {
      std::fprintf(stderr, "cordon-fs: %s\n", st.error().to_string().c_str());
      return 1;
    }
  }
  int exit_code = 0;
  auto opts = cordon::fusefs::parse_daemon_options(argc, argv, &exit_code);
  if (!opts.ok()) {
    return exit_code;
  }
  return cordon::fusefs::run_daemon(*opts);
}
