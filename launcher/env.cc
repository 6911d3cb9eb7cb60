// The sandbox's environment: start empty, copy kept names unless denied, then policy sets, then
// cordon's own variables.
#include "launcher/env.h"

#include <cctype>
#include <string_view>

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

}  // namespace

std::vector<std::string> build_environment(const policy::EnvPolicy& env, char** host_env,
                                           const std::map<std::string, std::string>& extra) {
  std::vector<std::string> out;
  for (const auto& keep : env.keep) {
    if (!valid_name(keep) || env.is_denied(keep)) {  // deny globs win over keep
      continue;
    }
    // The first occurrence wins, as getenv(3) would see it.
    for (char** e = host_env; e != nullptr && *e != nullptr; ++e) {
      std::string_view kv(*e);
      size_t eq = kv.find('=');
      if (eq == std::string_view::npos) {
        continue;
      }
      if (kv.substr(0, eq) == keep) {
        out.emplace_back(kv);
        break;
      }
    }
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
