// Which process of the sandbox made a connection: the program's end of it ("ip:port", as the
// proxy sees its peer) looked up in the sandbox's socket tables and the fds of its processes,
// all read from /proc outside the sandbox. The sandbox cannot forge the pid, the executable or
// the parent chain found this way (the kernel reports them); argv is the process's own memory,
// which it may have rewritten. Built with the protocol's lines (cordon::decider_wire): the proxy
// names the process in its questions, and `cordon run --ask` looks it up itself when the proxy
// could not (as root, the proxy runs as the sandbox's user and may not read the sandbox's /proc).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "netproxy/decider_wire.h"

namespace cordon::netproxy {

// `sandbox_init`: the sandbox's init, as this process's pid namespace numbers it. `client`:
// "A.B.C.D:PORT" or "[V6]:PORT". `udp`: look among UDP sockets (a DNS question over UDP) rather
// than TCP ones. Returns the process that holds the socket, then its parent and so on, up to and
// not including `sandbox_init` (at most DeciderQuestion::kMaxChain). Empty when the socket or
// its holder is not found, cannot be read (another user's process, not dumpable), or `budget`
// runs out first. Blocks while it reads /proc; never longer than about `budget`.
std::vector<SandboxProcess> find_client_process(pid_t sandbox_init, const std::string& client,
                                                bool udp, std::chrono::microseconds budget);

// The sandbox's init among the children of `cordon` (its name is cordon-init; no process of the
// sandbox can be a child of cordon), or 0.
pid_t find_sandbox_init(pid_t cordon);

// One process of the sandbox, by `pid` as this pid namespace numbers it (no chain). False when
// it cannot be read.
bool read_sandbox_process(pid_t pid, SandboxProcess* out);

}  // namespace cordon::netproxy
