// The effective policy as canonical JSON (session record policy.json) and as prose (`policy explain`).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "policy/policy.h"

namespace cordon::policy {

// Round-trips: parse_policy(to_json(p).dump()) yields an equal policy.
nlohmann::json to_json(const Policy& p);
// A human explanation, one line per effective rule, e.g. "network: no outbound connections".
std::string explain(const Policy& p);

}  // namespace cordon::policy
