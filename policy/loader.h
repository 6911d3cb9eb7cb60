// Loading a policy: JSON with comments -> validated Policy. The only throwing module; callers
// catch PolicyError at one place and print it.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "policy/policy.h"

namespace cordon::policy {

// what() reads like: `policy.json: network.allow[2]: "exa mple.com:443" is not a host pattern:
// spaces are not allowed in a name (accepted: name, *.suffix, IP, CIDR, with :port or :lo-hi)`.
class PolicyError : public std::runtime_error {
 public:
  PolicyError(std::string field_path, std::string message)
      : std::runtime_error(field_path.empty() ? message : field_path + ": " + message),
        field_path_(std::move(field_path)) {}
  // With the file name first: "policy.json: network.allow[2]: ...". field_path() stays the path.
  PolicyError(const std::string& source, std::string field_path, const std::string& message)
      : std::runtime_error(source + ": " +
                           (field_path.empty() ? message : field_path + ": " + message)),
        field_path_(std::move(field_path)) {}
  const std::string& field_path() const { return field_path_; }

 private:
  std::string field_path_;
};

struct LoadOptions {
  std::string home;                    // for "~" expansion; defaults to $HOME
  std::string source_name = "policy";  // file name used in error messages
  // An agent preset to extend, as "extends" would (`cordon run --agent NAME`); a policy that
  // extends another preset is refused.
  std::string agent;
};

// Parses `text` on top of the defaults (a key not given keeps its default). Unknown keys are
// rejected with a "did you mean". Throws PolicyError.
Policy parse_policy(std::string_view text, const LoadOptions& opts = {});
// Reads and parses a file. Throws PolicyError (naming the file) on I/O or parse errors.
Policy load_policy_file(const std::string& path, const LoadOptions& opts = {});
// The embedded default policy: no network, workspace copy-on-write, nothing of $HOME.
Policy default_policy(const LoadOptions& opts = {});
// Its source text (JSON with comments), as `cordon policy default` prints it.
std::string_view default_policy_text();

// One command-line override of a policy field (cordon run's flags). Applied on top of a loaded
// policy and validated by the same field validators as a policy file, so that a flag can never
// accept what the file refuses or the other way round.
struct Override {
  enum class How { Set, Append, Merge };  // replace the field; add to a list; add object keys
  std::string flag;                       // as the user typed it ("--read"): errors start with it
  std::string field;     // a dotted path into the schema: "filesystem.read", "process.memory"
  nlohmann::json value;  // Set: the new value; Append: one element; Merge: an object of keys
  How how = How::Set;
};
// Applies `o` to `p` (re-validating the whole policy with it). Throws PolicyError, whose text
// names the flag and the field: `--read: filesystem.read[1]: "x" is relative; ...`.
void apply_override(Policy& p, const Override& o, const LoadOptions& opts = {});

// Where more than one home is in play (root running the sandbox as another user, sudo), the
// rules written with "~" in filesystem.deny, deny_write and protect (the default secrets among
// them) are appended once more for each of `homes`, so they hold beneath every home the sandbox
// could be shown; earlier entries keep their index. Throws PolicyError for a home "~" cannot be.
void widen_home_rules(Policy& p, const std::vector<std::string>& homes);

// Sizes: "512", "512K", "64M", "1G", "1.5G", "2T" (binary units; "KiB"/"MB" style accepted).
std::optional<uint64_t> parse_size(std::string_view text);
// Durations: "250ms", "90s", "30m", "2h", "1d", "1m30s"; a bare number is seconds.
std::optional<Millis> parse_duration(std::string_view text);
std::string format_size(uint64_t bytes);
std::string format_duration(Millis d);

}  // namespace cordon::policy
