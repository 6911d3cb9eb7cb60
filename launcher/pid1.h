// cordon started as pid 1 of a pid namespace (a container's entrypoint): the reaper in front.
#pragma once

namespace cordon::launcher {

// When this process is pid 1, forks: the child returns and goes on as cordon; this process stays
// pid 1 for good and never returns. It reaps every process the namespace reparents to it (what
// the entrypoint left behind, sidecars' children), passes SIGTERM, SIGINT, SIGHUP, SIGQUIT,
// SIGUSR1, SIGUSR2 and SIGWINCH to cordon (the kernel drops signals a pid 1 has no handler for),
// and exits with cordon's status (128+N if cordon died of signal N). Not pid 1: returns at once.
// Keeping the reaper out of cordon itself means no waitpid(-1) can take a child that a part of
// cordon waits for by its pid.
void reap_as_pid1();

}  // namespace cordon::launcher
