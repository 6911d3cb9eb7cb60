// `cordon policy suggest`: the smallest policy additions a session's record shows it lacked
// (hosts and ports refused, host paths outside the workspace refused, execs outside
// process.exec_allow), each with its evidence, and with --tighten the allow entries it never used.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "policy/policy.h"

namespace cordon::launcher::suggest {

// What the record holds for one suggestion: how often, who first, one instance.
struct Evidence {
  uint64_t count = 0;
  std::string first_time;     // the first event's ts
  std::string first_process;  // "curl (pid 4): curl -sS http://api.test:8080/", or ""
  std::string example;        // "GET http://api.test:8080/", "open /srv/data/a.csv (read)"
};

// One entry to add: `entry` appended to the policy list `field`.
struct Suggestion {
  std::string field;  // network.allow | filesystem.read | filesystem.write | process.exec_allow
  std::string entry;  // exactly as it goes into the list: "api.test:8080", "/srv/data"
  std::string why;    // the refusal (or, in a --learn session, the use) it answers, and which
                      // rule chose the entry
  Evidence evidence;
  bool used = false;  // from what a --learn session used (allowed by the widening), not a refusal
};

// A refusal deliberately not turned into an allow: the built-in protection of private and
// metadata addresses, the policy's own deny rules, canaries and exfiltration, caps.
struct HeldBack {
  std::string what;    // "169.254.169.254:80", "/home/u/.ssh/id_ed25519"
  std::string reason;  // why no allow is suggested
  Evidence evidence;
};

// --tighten: an allow entry the session never used.
struct Unused {
  std::string field;  // "network.allow[1]"
  std::string entry;  // its text
  std::string why;
};

struct Report {
  std::string session;
  bool learn = false;  // a `cordon run --learn` session: uses are suggested as well as refusals
  std::vector<Suggestion> add;
  std::vector<HeldBack> held_back;
  std::vector<Unused> unused;      // only with tighten
  std::vector<std::string> notes;  // what the record could not show (e.g. successful opens)
  bool truncated = false;          // the scan stopped at its byte bound
};

struct Inputs {
  std::string session;
  // The policy suggestions are judged against: the session's effective policy (policy.json), or
  // for a --learn session the one the user asked for (kRequestedPolicy, session.h).
  const policy::Policy* policy = nullptr;
  // A --learn session: connections, requests and DNS answers that `policy` would not have
  // allowed are suggested like refusals (network.allow name:port, with their evidence).
  bool learn = false;
  std::string workspace;  // the host workspace (session.start), "" if unknown
  std::string home;       // the invoking user's home, for canaries
  // cordon's own state directory (the sessions root's parent, or --state-dir): no path in it,
  // and no directory holding it, is ever suggested.
  std::string state_dir;
  bool tighten = false;
};

// Reads an open events.jsonl (bounded, through store::for_each_line) and builds the report.
// Host paths are checked on the host (stat) to choose between a file and its directory. Each
// suggestion is checked on its own by the policy loader, so that every one in `add` can be
// applied whatever the others are; one the loader refuses is held back with its reason. Never in
// `add`: a socket, a directory holding one or a directory for sockets (/run, /var/run,
// /tmp/.X11-unix: a grant would connect the sandbox to a host service), cordon's state
// directory, a name of the host's loopback or of a cloud metadata service.
Report build_report(int events_fd, const Inputs& in);

// The report for a person: each suggestion's entry, why, count, first process and example.
std::string format_text(const Report& r);
// The same for machines (`--json`): {"session", "add": [...], "held_back": [...], "unused": [...]}.
nlohmann::json to_json(const Report& r);

}  // namespace cordon::launcher::suggest
