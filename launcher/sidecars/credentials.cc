// Placeholders for network.credentials and the secrets' handover text for cordon-netproxy.
#include "launcher/sidecars/credentials.h"

#include <sys/random.h>

#include <array>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace cordon::launcher {
namespace {

// Longest first, so "sk-ant-" is kept whole rather than as "sk-".
constexpr std::array<std::string_view, 11> kPrefixes = {
    "github_pat_", "sk-ant-api03-", "sk-ant-", "sk-proj-", "xoxb-", "xoxp-",
    "ghp_",        "gho_",          "ghs_",    "glpat-",   "sk-"};

// Fewer random characters than this could be guessed, or collide with ordinary text.
constexpr size_t kMinRandom = 8;

bool is_class_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

}  // namespace

Result<std::string> make_placeholder(std::string_view real) {
  size_t keep = 0;
  for (auto p : kPrefixes) {
    if (real.starts_with(p)) {
      keep = p.size();
      break;
    }
  }
  size_t classed = 0;
  for (size_t i = keep; i < real.size(); ++i) {
    classed += is_class_char(real[i]) ? 1 : 0;
  }
  if (classed < kMinRandom) {
    return make_error(
        "the value has " + std::to_string(classed) +
            " letters or digits after its prefix, too few for a placeholder that "
            "cannot be guessed",
        "a credential is a token of at least " + std::to_string(kMinRandom) + " letters or digits");
  }
  std::string out(real);
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string rnd(real.size(), '\0');
    if (::getrandom(rnd.data(), rnd.size(), 0) != static_cast<ssize_t>(rnd.size())) {
      return sys_error("getrandom() for a credential placeholder");
    }
    for (size_t i = keep; i < real.size(); ++i) {
      const auto r = static_cast<unsigned char>(rnd[i]);
      const char c = real[i];
      if (c >= '0' && c <= '9') {
        out[i] = static_cast<char>('0' + r % 10);
      } else if (c >= 'a' && c <= 'z') {
        out[i] = static_cast<char>('a' + r % 26);
      } else if (c >= 'A' && c <= 'Z') {
        out[i] = static_cast<char>('A' + r % 26);
      }
    }
    if (out != real) {
      return out;
    }
  }
  return make_error("no placeholder differing from the value came out of 16 draws");
}

Result<std::string> plant_placeholders(const policy::NetworkPolicy& net, LaunchPlan& plan) {
  if (net.credentials.empty()) {
    return std::string();
  }
  nlohmann::json handover = nlohmann::json::array();
  for (size_t i = 0; i < net.credentials.size(); ++i) {
    const auto& c = net.credentials[i];
    const std::string at = "network.credentials[" + std::to_string(i) + "].env";
    const char* value = std::getenv(c.env.c_str());
    if (value == nullptr || *value == '\0') {
      return make_error(at + ": " + c.env + " is not set in cordon's environment",
                        "export " + c.env + " before cordon run, or remove the credential");
    }
    auto placeholder = make_placeholder(value);
    if (!placeholder.ok()) {
      return make_error(at + ": " + c.env + ": " + placeholder.error().to_string());
    }
    const std::string prefix = c.env + "=";
    std::erase_if(plan.envp, [&](const std::string& kv) { return kv.starts_with(prefix); });
    plan.envp.push_back(prefix + *placeholder);
    handover.push_back({{"env", c.env}, {"placeholder", *placeholder}, {"value", value}});
  }
  return handover.dump();
}

}  // namespace cordon::launcher
