// The effective policy as canonical JSON (session record policy.json) and as prose (`policy
// explain`).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "policy/policy.h"

namespace cordon::policy {

// Round-trips: parse_policy(to_json(p).dump()) yields an equal policy.
nlohmann::json to_json(const Policy& p);
// What a session record keeps (policy.json): to_json, except that the value of every
// process.env.set entry whose name is a secret (EnvPolicy::is_secret) is kRedactedValue. The
// record still parses as a policy; no credential cordon was handed reaches the disk.
nlohmann::json to_record_json(const Policy& p);
inline constexpr char kRedactedValue[] = "(secret, not recorded)";
// A human explanation, one line per effective rule, e.g. "network: no outbound connections".
std::string explain(const Policy& p);

// A CPU quota as `explain` says it: "unlimited CPU", "1 CPU", "2 CPUs", "0.5 CPUs".
std::string cpus_text(double cpus);

}  // namespace cordon::policy
