// Attribution: the proxy's connection records joined with the shim's net.connect records on the
// client's address, so each connection names the process (pid, exe, argv) that made it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/result.h"
#include "record/events.h"

namespace cordon::launcher {

// How far apart (either way) a proxy record and the shim record of the same client address may
// be. The shim reports right after connect(2) returns; the proxy's net.connect comes at close,
// its refusals possibly before the collector wrote the shim's record.
inline constexpr double kAttributionWindowSeconds = 2.0;

// For every netproxy record (net.connect, net.refused, net.http, net.exfil, net.decider) that
// carries "client"
// (the sandbox-side peer address the proxy accepted, "ip:port" / "[v6]:port"), one
// "net.attribution" record: the proxy record's kind/name/port/client plus the pid, ppid, exe, argv
// of the shim net.connect whose "local" equals the client address (the latest one up to the window
// after the proxy record), or "unattributed": true when no shim record matches (static binaries,
// raw syscalls, io_uring: the shim cannot see them; never guessed). A shim record's "local" is the
// kernel's, read from the connected socket itself: a local address a process merely claimed
// (under "claimed") joins nothing, so no record can take another process's connection.
std::vector<nlohmann::json> attribute_connections(const std::vector<nlohmann::json>& events);

// For every cordon-fs refusal (fs.refused, "pid" = the caller's host pid, "exe" read by the daemon
// at refusal time), one "fs.attribution" record: the refusal's path/op/rule plus the argv, ppid and
// sandbox pid of the shim's latest proc.start/proc.exec record from the same host pid (the
// collector's kernel-verified "cred".pid) whose exe is the refusal's exe - so a process that
// exec'ed since is never given its later command line; "unattributed": true when none matches.
std::vector<nlohmann::json> attribute_fs_refusals(const std::vector<nlohmann::json>& events);

// Reads `events_path` (bounded) and appends both joins' records through `log`.
Status record_connection_attribution(const std::string& events_path, const record::EventLog& log);

}  // namespace cordon::launcher
