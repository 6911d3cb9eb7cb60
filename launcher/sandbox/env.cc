// The sandbox's environment: start empty, copy kept names unless denied, passed names even when
// denied, then policy sets, then cordon's own variables.
#include "launcher/sandbox/env.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string_view>

#include "launcher/diagnostics.h"

namespace cordon::launcher {

namespace {

// POSIX portable names plus lowercase: [A-Za-z_][A-Za-z0-9_]*. Anything else ("A-B", "X Y",
// "BASH_FUNC_f%%") is dropped: shells disagree on how to handle it, and exported bash functions
// are code the host would inject into the sandbox.
bool valid_name(std::string_view n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) {
    return false;
  }
  for (char c : n) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
      return false;
    }
  }
  return true;
}

void set_var(std::vector<std::string>& out, const std::string& name, const std::string& value) {
  for (auto& kv : out) {
    if (kv.size() > name.size() && kv[name.size()] == '=' &&
        kv.compare(0, name.size(), name) == 0) {
      kv = name + "=" + value;
      return;
    }
  }
  out.push_back(name + "=" + value);
}

// The first occurrence of `name` in the host's environment ("K=V"), as getenv(3) would see it.
const char* host_entry(char** host_env, std::string_view name) {
  for (char** e = host_env; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string_view::npos && kv.substr(0, eq) == name) {
      return *e;
    }
  }
  return nullptr;
}

std::string deny_rule(size_t i) { return "process.env.deny[" + std::to_string(i) + "]"; }

}  // namespace

std::vector<std::string> env_note_lines(const EnvNotes& n) {
  std::vector<std::string> out;
  for (const auto& e : n.kept_but_denied) {
    out.push_back("environment: " + e.name + " is not passed although kept: " + e.rule + " (\"" +
                  e.pattern + "\") wins over keep; to hand it to the program, --env-pass " +
                  e.name + " (process.env.pass)");
  }
  for (const auto& e : n.passed) {
    out.push_back("environment: passing " + e.name + " from the host (process.env.pass)" +
                  (e.rule.empty() ? std::string()
                                  : " although " + e.rule + " (\"" + e.pattern + "\") matches it") +
                  "; its value is not recorded");
  }
  for (const auto& name : n.pass_missing) {
    out.push_back("environment: " + name +
                  " is to be passed (process.env.pass) but is not set here: nothing passed");
  }
  return out;
}

void report_env_notes(const EnvNotes& n, const record::EventLog& events, bool quiet) {
  if (!quiet) {
    for (const auto& line : env_note_lines(n)) {
      say(line);
    }
  }
  for (const auto& e : n.kept_but_denied) {
    (void)events.emit(
        "env.refused",
        {{"decision", "deny"}, {"name", e.name}, {"rule", e.rule}, {"pattern", e.pattern}});
  }
  for (const auto& e : n.passed) {
    nlohmann::json f = {{"decision", "allow"}, {"name", e.name}, {"rule", "process.env.pass"}};
    if (!e.rule.empty()) {
      f["overrides"] = e.rule;
    }
    (void)events.emit("env.passed", std::move(f));
  }
}

std::vector<std::string> build_environment(const policy::EnvPolicy& env, char** host_env,
                                           const std::map<std::string, std::string>& extra,
                                           EnvNotes* notes) {
  EnvNotes unused;
  EnvNotes& n = notes != nullptr ? *notes : unused;
  std::vector<std::string> out;
  auto passed = [&](const std::string& name) {
    return std::find(env.pass.begin(), env.pass.end(), name) != env.pass.end();
  };
  for (const auto& keep : env.keep) {
    if (!valid_name(keep) || passed(keep)) {
      continue;  // a passed name is copied below, deny or not
    }
    const char* kv = host_entry(host_env, keep);
    if (kv == nullptr) {
      continue;
    }
    if (auto d = env.denied_by(keep)) {  // deny globs win over keep: said, not silent
      n.kept_but_denied.push_back({keep, deny_rule(*d), env.deny[*d]});
      continue;
    }
    out.emplace_back(kv);
  }
  for (const auto& name : env.pass) {
    const char* kv = valid_name(name) ? host_entry(host_env, name) : nullptr;
    if (kv == nullptr) {
      n.pass_missing.push_back(name);
      continue;
    }
    auto d = env.denied_by(name);
    n.passed.push_back({name, d ? deny_rule(*d) : "", d ? env.deny[*d] : ""});
    set_var(out, name, std::string(kv + name.size() + 1));
  }
  for (const auto& [name, value] : env.set) {
    if (valid_name(name)) {
      set_var(out, name, value);
    }
  }
  for (const auto& [name, value] : extra) {
    if (valid_name(name)) {
      set_var(out, name, value);
    }
  }
  return out;
}

}  // namespace cordon::launcher
