// The policy's canaries under `cordon run`: decoy secrets made for the session, planted in the
// sandbox's environment and home only, and the values cordon-netproxy refuses to let out.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/result.h"
#include "launcher/plan.h"
#include "policy/policy.h"

namespace cordon::launcher {

// A decoy's value shapes, each random per call.
std::string make_aws_key_id();       // AKIA + 16 of [A-Z0-9]
std::string make_aws_secret();       // 40 of [A-Za-z0-9/+]
std::string make_github_token();     // ghp_ + 36 of [A-Za-z0-9]
Result<std::string> make_ssh_key();  // an unencrypted OpenSSH ed25519 private key, PEM-armoured

struct PlantedCanaries {
  // For cordon-netproxy's --credentials-fd: [{"canary": name, "value": v}, ...], one entry per
  // value a request must not carry.
  nlohmann::json handover = nlohmann::json::array();
  // One line each for the start: a decoy left out because the real thing is there.
  std::vector<std::string> notes;
  std::vector<std::string> planted;  // "aws (env, ~/.aws/credentials)", ... for the start line
};

// Makes the policy's canaries: environment decoys go into plan.envp where the variable is not
// passed already; file decoys become plan.decoys, which the sandbox's child writes into its home
// (sandbox/decoys.h), unless a mount of the plan already shows that path (a real file the policy
// grants wins). No decoy is written on the host.
Result<PlantedCanaries> plant_canaries(const policy::Policy& p, LaunchPlan& plan);

}  // namespace cordon::launcher
