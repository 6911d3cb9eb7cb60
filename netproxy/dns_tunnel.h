// Names shaped like a DNS tunnel: data encoded in the labels of names under a zone whose servers
// the sender reads. Checked for names that nothing but a bare `*` allows (what `cordon run
// --learn` adds): there the policy names no zone, so any zone could be the receiver. A name the
// user allowed by its zone is the user's choice and is not checked.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "policy/policy.h"

namespace cordon::netproxy {

// Longest label, and longest name, a name allowed only by `*` may have.
inline constexpr size_t kMaxLearnLabel = 40, kMaxLearnName = 120;
// A label at least this long that mixes letters and digits with this much entropy (bits per
// character: 16 random base-36 characters have 3.4 to 3.8, 20 hex digits 3.1 to 3.5) reads as
// encoded data.
inline constexpr size_t kMinEncodedLabel = 16;
inline constexpr double kEncodedEntropy = 3.0;

// Why `name` looks like tunnelled data ("a label of 63 characters", ...); nullopt if it does not.
std::optional<std::string> tunnel_shaped(std::string_view name);

// The rule refusals name.
inline constexpr const char* kTunnelRule =
    "network (only * allows it: a name shaped like a DNS tunnel)";

// True when `d` allows only because of a bare `*` entry (every name).
inline bool allowed_by_any_name(const policy::NetDecision& d) {
  return d.allow && d.pattern != nullptr && d.pattern->text == "*";
}

}  // namespace cordon::netproxy
