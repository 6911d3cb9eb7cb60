// Importing another sandbox's settings (sandbox-runtime's JSON, Codex's config.toml) as a cordon
// policy: the shared result, the format detection `cordon run --policy` uses, and the rendering
// of the result as a commented policy file.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/loader.h"

namespace cordon::policy::import {

// Input files larger than this are refused before parsing (the loader's cap for policies).
inline constexpr size_t kMaxInputBytes = 1 << 20;
// Deeper nesting than this is refused: no real settings file comes near it.
inline constexpr int kMaxInputDepth = 64;

enum class Format { Cordon, Srt, Codex };

// A setting of the input with no cordon equivalent, and why.
struct Unmapped {
  std::string key;  // its path in the input: "network.deniedDomainReasons", "model"
  std::string why;
  bool unknown = false;  // not a key the input format defines at all
};

// What an importer made of one input file. Every setting it read is counted in `settings` and
// is either in `policy` (with its origin), a note (taken into account without an entry), or in
// `unmapped`: nothing is dropped silently.
struct ImportResult {
  nlohmann::ordered_json policy = nlohmann::ordered_json::object();
  std::map<std::string, std::string> origin;  // cordon path ("network.allow[0]") -> input path
  std::vector<std::string> notes;             // "input.key: how cordon covers it"
  std::vector<Unmapped> unmapped;
  size_t settings = 0;

  // Appends `value` to the list at `path` ("network.allow"), remembering where it came from.
  void add(const std::string& path, nlohmann::ordered_json value, const std::string& from);
  // Sets the scalar or object at `path` ("filesystem.mode").
  void set(const std::string& path, nlohmann::ordered_json value, const std::string& from);
  // Counts a setting that needs no entry of its own and says why in the output's header.
  void note(const std::string& from, const std::string& how);
  void skip(const std::string& from, const std::string& why);
  void unknown(const std::string& from, const std::string& format_name);
};

// Throws the PolicyError an importer raises for bad input: "FILE: key.path: message".
[[noreturn]] void refuse(const std::string& source, const std::string& key,
                         const std::string& message);

// Reads a settings file: a regular file of at most kMaxInputBytes. Throws PolicyError naming it.
std::string read_input_file(const std::string& path);

// Which format `text` is, decided by its keys: JSON whose keys are sandbox-runtime's and none of
// cordon's is Srt; JSON with cordon's keys (or none of either) is Cordon; JSON with both is
// refused as ambiguous; TOML that is not JSON is Codex. Text that is neither JSON nor TOML is
// Cordon (the loader then reports the JSON error), unless `source` ends in ".toml".
Format detect_format(std::string_view text, const std::string& source);

// Runs the loader over the result (errors name `source`). Deny entries are first put in
// cordon's syntax (normalise_deny(), deny_entries.h); a deny that cannot be, or that the loader
// still refuses, fails the import: a deny is never weaker after import. An allow or other entry
// the loader refuses (a host pattern cordon does not accept, a relative path where an absolute
// one is needed) moves to `unmapped` with the loader's reason, which only narrows the policy, so
// that the policy left passes `cordon policy check`. Throws PolicyError for a deny that cannot be
// mapped, naming its input key and the fix, and when the loader refuses something that is not
// one entry of a list.
void settle(ImportResult& r, const std::string& source, const LoadOptions& lo = {});

// The policy as a file: JSON with `//` comments naming where each entry came from, the notes
// and the settings without equivalent.
std::string render(const ImportResult& r, const std::string& source, std::string_view format_name);
// The report: one line per setting without equivalent.
std::string report(const ImportResult& r, const std::string& source, std::string_view format_name);

// "sandbox-runtime settings" / "Codex config.toml"; and "srt" / "codex" as the command names it.
std::string_view format_name(Format f);
std::string_view format_command(Format f);

// Loads `path` as `cordon run` does: a cordon policy through the loader, a sandbox-runtime or
// Codex file imported on the fly. For an imported file `*said` receives the one line to print
// ("FILE is a sandbox-runtime settings file; imported it (...)"). Throws PolicyError.
Policy load_policy_or_import(const std::string& path, const LoadOptions& lo,
                             std::optional<std::string>* said);

// Imports one file in the given format (Srt or Codex) and settles it. `profile` is Codex's
// --profile ("" for the file's own choice). Throws PolicyError.
ImportResult import_file(Format f, const std::string& path, const std::string& profile,
                         const LoadOptions& lo = {});
ImportResult import_text(Format f, std::string_view text, const std::string& source,
                         const std::string& profile, const LoadOptions& lo = {});

}  // namespace cordon::policy::import
