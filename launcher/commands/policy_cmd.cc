// `cordon policy default | check FILE | explain [FILE]`, each optionally with --agent NAME.
#include <cstdio>
#include <iostream>

#include "launcher/commands.h"
#include "launcher/diagnostics.h"
#include "launcher/identity.h"
#include "launcher/sandbox/landlock.h"
#include "launcher/sandbox/seccomp.h"
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
  return file.empty() ? policy::default_policy(lo) : policy::load_policy_file(file, lo);
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

}  // namespace cordon::launcher
