// cordon-fs: the copy-on-write workspace view of a cordon session (see fusefs/daemon.h).
#include <cstdio>

#include "fusefs/daemon.h"

int main(int argc, char** argv) {
  int exit_code = 0;
  auto opts = cordon::fusefs::parse_daemon_options(argc, argv, &exit_code);
  if (!opts.ok()) {
    return exit_code;
  }
  return cordon::fusefs::run_daemon(*opts);
}
