// Reading the run's policy: file, flags, whose home "~" is, and the other homes' secrets.
#include "launcher/effective_policy.h"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <optional>

#include "launcher/diagnostics.h"
#include "launcher/identity.h"
#include "policy/import/import.h"
#include "policy/presets.h"

namespace cordon::launcher {
namespace {

using policy::Override;
using How = policy::Override::How;

// Counts are numbers in the policy file: a flag's text becomes one when it reads as one, so the
// loader's message for "--pids abc" is the same as for "pids": "abc" in a file.
nlohmann::json number_or_text(const std::string& text) {
  if (!text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos) {
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_number()) {
      return j;
    }
  }
  return text;
}

// "NAME=HOST[,HOST...]" as a network.credentials entry; the loader checks the name and hosts.
nlohmann::json credential_entry(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    throw policy::PolicyError("--credential", "",
                              "\"" + text +
                                  "\" is not NAME=HOST[,HOST...] (the variable holding the "
                                  "secret and the hosts it may be sent to, e.g. "
                                  "GITHUB_TOKEN=api.github.com,github.com)");
  }
  nlohmann::json hosts = nlohmann::json::array();
  for (size_t at = eq + 1; at <= text.size();) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) {
      comma = text.size();
    }
    hosts.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return {{"env", text.substr(0, eq)}, {"hosts", std::move(hosts)}};
}

// `said`: where an imported file's one line goes (the first read says it, not the second).
policy::Policy read_policy(const RunOptions& o, const std::string& home,
                           std::optional<std::string>* said) {
  if (o.agent && policy::find_preset(*o.agent) == nullptr) {
    throw policy::PolicyError("", "--agent: " + policy::unknown_preset(*o.agent));
  }
  policy::LoadOptions lo;
  lo.home = home;
  lo.agent = o.agent.value_or("");
  // A sandbox-runtime or Codex settings file is imported on the fly (policy/import/import.h).
  policy::Policy p = o.policy_file ? policy::import::load_policy_or_import(*o.policy_file, lo, said)
                                   : policy::default_policy(lo);
  for (const Override& ov : run_overrides(o)) {
    policy::apply_override(p, ov, lo);
  }
  if (o.learn) {
    for (const Override& ov : learn_overrides()) {
      policy::apply_override(p, ov, lo);
    }
  }
  return p;
}

// The workspace as the plan will resolve it ("~" as the invoking user's home), when it exists.
std::optional<std::string> resolved_workspace(const policy::Policy& p, const HostFacts& host,
                                              const std::string& home) {
  std::string ws = p.filesystem.workspace.empty() ? "." : p.filesystem.workspace;
  if (ws == "~" || ws.rfind("~/", 0) == 0) {
    ws = home + ws.substr(1);
  }
  if (ws[0] != '/') {
    ws = host.cwd + "/" + ws;
  }
  char buf[PATH_MAX];
  if (::realpath(ws.c_str(), buf) == nullptr) {
    return std::nullopt;
  }
  return std::string(buf);
}

}  // namespace

std::vector<Override> run_overrides(const RunOptions& o) {
  std::vector<Override> out;
  auto set = [&](const char* flag, const char* field, const std::optional<std::string>& v,
                 bool numeric = false) {
    if (v) {
      out.push_back({flag, field, numeric ? number_or_text(*v) : nlohmann::json(*v), How::Set});
    }
  };
  set("--workspace", "filesystem.workspace", o.workspace);
  set("--mode", "filesystem.mode", o.mode);
  set("--memory", "process.memory", o.memory);
  set("--cpus", "process.cpus", o.cpus, true);
  set("--pids", "process.pids", o.pids, true);
  set("--nofile", "process.nofile", o.nofile, true);
  set("--timeout", "process.timeout", o.timeout);
  set("--events-to", "record.events_to", o.events_to);
  set("--otlp", "record.otlp", o.otlp);
  for (const auto& v : o.read) {
    out.push_back({"--read", "filesystem.read", v, How::Append});
  }
  for (const auto& v : o.write) {
    out.push_back({"--write", "filesystem.write", v, How::Append});
  }
  for (const auto& v : o.env_keep) {
    out.push_back({"--env-keep", "process.env.keep", v, How::Append});
  }
  for (const auto& v : o.env_pass) {
    out.push_back({"--env-pass", "process.env.pass", v, How::Append});
  }
  for (const auto& kv : o.env_set) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw policy::PolicyError("--env-set", "", "\"" + kv + "\" is not NAME=VALUE");
    }
    out.push_back({"--env-set", "process.env.set",
                   nlohmann::json{{kv.substr(0, eq), kv.substr(eq + 1)}}, How::Merge});
  }
  for (const auto& h : o.allow_host) {
    out.push_back({"--allow-host", "network.allow", h, How::Append});
  }
  for (const auto& h : o.inspect) {
    out.push_back({"--inspect", "network.inspect", h, How::Append});
  }
  for (const auto& c : o.credential) {
    out.push_back({"--credential", "network.credentials", credential_entry(c), How::Append});
  }
  return out;
}

std::vector<Override> learn_overrides() {
  std::vector<Override> out;
  // Names only: "*" never matches an address literal, so a raw-IP connection is still refused
  // (and suggested like any refusal), as are documentation ranges such as 198.51.100.0/24; a
  // name that resolves to a private, loopback or metadata address is refused by the check of
  // resolved addresses unless network.resolve pins it.
  out.push_back({"--learn", "network.allow", "*", How::Append});
  out.push_back(
      {"--learn", "process.env.set", nlohmann::json{{"CORDON_SHIM_FS_EVENTS", "all"}}, How::Merge});
  return out;
}

namespace {

policy::Policy load_policy(const RunOptions& o, const HostFacts& host, bool say_import) {
  const std::string invoking = invoking_home(host);
  std::optional<std::string> imported;
  policy::Policy p = read_policy(o, invoking, &imported);
  if (imported && say_import) {
    say(*imported);
  }
  auto ws = resolved_workspace(p, host, invoking);
  if (!ws) {
    return p;
  }
  struct stat st {};
  if (::stat(ws->c_str(), &st) != 0) {
    return p;
  }
  Identity id = choose_identity(host, st);
  if (id.home != invoking) {
    p = read_policy(o, id.home, nullptr);
  }
  // Settled: the workspace is the one found with the invoking user's "~".
  p.filesystem.workspace = *ws;
  policy::widen_home_rules(p, id.other_homes);
  return p;
}

}  // namespace

policy::Policy load_effective_policy(const RunOptions& o, const HostFacts& host) {
  return load_policy(o, host, /*say_import=*/true);
}

policy::Policy load_requested_policy(const RunOptions& o, const HostFacts& host) {
  RunOptions asked = o;
  asked.learn = false;
  return load_policy(asked, host, /*say_import=*/false);
}

}  // namespace cordon::launcher
