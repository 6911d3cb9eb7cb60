// The shared half of `cordon policy import`: the result, detection, settling, rendering.
#include "policy/import/import.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/read_up_to.h"
#include "base/unique_fd.h"
#include "policy/import/codex_import.h"
#include "policy/import/deny_entries.h"
#include "policy/import/srt_import.h"

namespace cordon::policy::import {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<std::string> split_dots(const std::string& path) {
  std::vector<std::string> out;
  size_t at = 0;
  while (true) {
    size_t dot = path.find('.', at);
    out.push_back(path.substr(at, dot == std::string::npos ? std::string::npos : dot - at));
    if (dot == std::string::npos) {
      return out;
    }
    at = dot + 1;
  }
}

// The value at a dotted path, made (as objects) where missing.
ojson& at_path(ojson& root, const std::string& path) {
  ojson* v = &root;
  for (const auto& part : split_dots(path)) {
    if (!v->is_object()) {
      *v = ojson::object();
    }
    v = &(*v)[part];
  }
  return *v;
}

// The value at a dotted path, or nullptr.
ojson* find_path(ojson& root, const std::string& path) {
  ojson* v = &root;
  for (const auto& part : split_dots(path)) {
    if (!v->is_object() || !v->contains(part)) {
      return nullptr;
    }
    v = &(*v)[part];
  }
  return v;
}

// The loader's message without its field path: what the report says after the input key.
std::string bare_message(const PolicyError& e) {
  std::string what = e.what();
  std::string prefix = e.field_path() + ": ";
  size_t at = what.find(prefix);
  return at == std::string::npos ? what : what.substr(at + prefix.size());
}

// Removes element `index` of the list at `list_path`, and the origins shift down with it.
// Returns the input key the element came from.
std::string remove_element(ImportResult& r, ojson& list, const std::string& list_path,
                           size_t index) {
  auto key = [&](size_t i) { return list_path + "[" + std::to_string(i) + "]"; };
  std::string from = r.origin.count(key(index)) ? r.origin[key(index)] : list_path;
  list.erase(list.begin() + static_cast<long>(index));
  for (size_t i = index; i < list.size(); ++i) {
    r.origin[key(i)] = r.origin[key(i + 1)];
  }
  r.origin.erase(key(list.size()));
  if (list.empty()) {
    // An empty list the input never asked for would read as an intent; leave the default.
    ojson* section = find_path(r.policy, list_path.substr(0, list_path.rfind('.')));
    if (section != nullptr && section->is_object()) {
      section->erase(list_path.substr(list_path.rfind('.') + 1));
    }
  }
  return from;
}

// The deepest bracket nesting of JSON text, strings and comments skipped.
int json_depth(std::string_view text) {
  int depth = 0, max_depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') {
          ++i;
        }
      }
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      i = text.find('\n', i);
      if (i == std::string_view::npos) {
        break;
      }
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      i = text.find("*/", i + 2);
      if (i == std::string_view::npos) {
        break;
      }
      ++i;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

// The JSON object of `text`, or nullopt when it is not JSON or not an object. Deeper nesting
// than kMaxInputDepth is not looked at (the loader, or the importer, refuses it by name).
std::optional<nlohmann::json> parse_json_object(std::string_view text) {
  if (json_depth(text) > kMaxInputDepth) {
    return std::nullopt;
  }
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false,
                                 /*ignore_comments=*/true);
  if (j.is_discarded() || !j.is_object()) {
    return std::nullopt;
  }
  return j;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// cordon's own keys in the sections srt shares by name (network, filesystem), and at the top.
bool is_cordon_key(std::string_view section, std::string_view key) {
  static const std::vector<std::string_view> top = {"version", "extends", "process", "record",
                                                    "canaries"};
  static const std::vector<std::string_view> network = {"allow",
                                                        "deny",
                                                        "max_connections",
                                                        "max_connections_per_host",
                                                        "connections_per_minute",
                                                        "max_bytes_out",
                                                        "max_bytes_in",
                                                        "idle_timeout",
                                                        "connect_timeout",
                                                        "resolve",
                                                        "dns",
                                                        "proxy_env",
                                                        "rules",
                                                        "inspect",
                                                        "inspect_exclude",
                                                        "ca",
                                                        "credentials",
                                                        "on_exfil"};
  static const std::vector<std::string_view> filesystem = {
      "workspace", "mode",       "read",  "write", "deny",  "deny_write",
      "protect",   "deny_style", "quota", "tmp",   "xattrs"};
  const auto& list = section.empty() ? top : section == "network" ? network : filesystem;
  return std::find(list.begin(), list.end(), key) != list.end();
}

// The embedded default's entries of a list, for the lists an import adds to without replacing:
// a policy file's list replaces the default, and an imported deny list must not drop cordon's
// own (its secrets in $HOME, its secret-looking variables).
ojson default_entries(const std::string& path) {
  if (path != "filesystem.deny" && path != "process.env.deny") {
    return ojson::array();
  }
  static const ojson defaults = ojson::parse(default_policy_text(), nullptr,
                                             /*allow_exceptions=*/false, /*ignore_comments=*/true);
  ojson copy = defaults;
  ojson* v = find_path(copy, path);
  return v != nullptr && v->is_array() ? *v : ojson::array();
}

[[noreturn]] void refuse_deny(const std::string& source, const std::string& from,
                              const std::string& value, const std::string& why) {
  refuse(source, from,
         "the deny entry " + value + " cannot be put in cordon's syntax: " + why +
             ". An import never leaves a deny out, since the allow entries would then let "
             "through what the file refused: write it as cordon takes it (a host name such as "
             "\"example.com\", a path without \"..\") and import again");
}

// Rewrites each deny entry the way normalise_deny() says, or refuses the import: a deny must
// never be weaker after import than in the file.
void harden_denies(ImportResult& r, const std::string& source, const std::string& home) {
  for (std::string_view deny_list : kDenyLists) {
    const std::string list_path(deny_list);
    ojson* list = find_path(r.policy, list_path);
    if (list == nullptr || !list->is_array()) {
      continue;
    }
    auto key = [&](size_t i) { return list_path + "[" + std::to_string(i) + "]"; };
    ojson fresh = ojson::array();
    std::vector<std::string> origins;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string from = r.origin.count(key(i)) ? r.origin[key(i)] : list_path;
      r.origin.erase(key(i));
      const ojson& v = (*list)[i];
      if (!v.is_string()) {
        fresh.push_back(v);  // the loader names the wrong type
        origins.push_back(from);
        continue;
      }
      std::string why;
      auto normal = normalise_deny(list_path, v.get<std::string>(), home, &why);
      if (!normal) {
        refuse_deny(source, from, v.dump(), why);
      }
      for (const auto& f : *normal) {
        if (std::find(fresh.begin(), fresh.end(), ojson(f)) != fresh.end()) {
          continue;
        }
        if (f != v.get<std::string>()) {
          r.notes.push_back(from + ": " + v.dump() + " is denied as " + ojson(f).dump());
        }
        fresh.push_back(f);
        origins.push_back(from);
      }
    }
    *list = std::move(fresh);
    for (size_t i = 0; i < origins.size(); ++i) {
      r.origin[key(i)] = origins[i];
    }
  }
}

}  // namespace

void ImportResult::add(const std::string& path, ojson value, const std::string& from) {
  ++settings;
  ojson& list = at_path(policy, path);
  if (!list.is_array()) {
    list = ojson::array();
    for (auto& d : default_entries(path)) {
      origin[path + "[" + std::to_string(list.size()) + "]"] = "cordon's default";
      list.push_back(std::move(d));
    }
  }
  if (auto it = std::find(list.begin(), list.end(), value); it != list.end()) {
    std::string& o = origin[path + "[" + std::to_string(it - list.begin()) + "]"];
    if (o == "cordon's default") {
      o = from + " (and cordon's default)";
    } else {
      notes.push_back(from + ": already in " + path);
    }
    return;
  }
  origin[path + "[" + std::to_string(list.size()) + "]"] = from;
  list.push_back(std::move(value));
}

void ImportResult::set(const std::string& path, ojson value, const std::string& from) {
  ++settings;
  at_path(policy, path) = std::move(value);
  origin[path] = from;
}

void ImportResult::note(const std::string& from, const std::string& how) {
  ++settings;
  notes.push_back(from + ": " + how);
}

void ImportResult::skip(const std::string& from, const std::string& why) {
  ++settings;
  unmapped.push_back({from, why, false});
}

void ImportResult::unknown(const std::string& from, const std::string& fmt) {
  ++settings;
  unmapped.push_back({from, "unknown key: not part of " + fmt + "'s settings", true});
}

void refuse(const std::string& source, const std::string& key, const std::string& message) {
  throw PolicyError(source, key, message);
}

std::string read_input_file(const std::string& path) {
  auto fail = [&](const std::string& what) { refuse(path, "", what); };
  // O_NONBLOCK: a FIFO planted where the file was expected must not hang cordon.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) {
    int e = errno;
    fail(std::string("cannot open it: ") + std::strerror(e) +
         (e == ENOENT ? " (check the path)" : ""));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    fail(std::string("fstat failed: ") + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    fail("is not a regular file (pass the settings file itself)");
  }
  auto text = read_up_to(fd.get(), kMaxInputBytes + 1);
  if (!text) {
    fail(std::string("cannot read it: ") + std::strerror(errno));
  }
  if (text->size() > kMaxInputBytes) {
    fail("is larger than 1 MiB; a settings file is far smaller (is this the right file?)");
  }
  return *text;
}

Format detect_format(std::string_view text, const std::string& source) {
  if (auto j = parse_json_object(text)) {
    std::vector<std::string> srt, cordon;
    for (const auto& [key, value] : j->items()) {
      if (key == "network" || key == "filesystem") {
        if (!value.is_object()) {
          continue;
        }
        for (const auto& [k, v] : value.items()) {
          (void)v;
          if (is_srt_key(key, k)) {
            srt.push_back(key + "." + k);
          } else if (is_cordon_key(key, k)) {
            cordon.push_back(key + "." + k);
          }
        }
      } else if (is_srt_key("", key)) {
        srt.push_back(key);
      } else if (is_cordon_key("", key)) {
        cordon.push_back(key);
      }
    }
    if (!srt.empty() && !cordon.empty()) {
      refuse(source, "",
             "has keys of a cordon policy (" + cordon.front() +
                 ") and of sandbox-runtime's "
                 "settings (" +
                 srt.front() +
                 "); cordon cannot tell which it is. Keep one kind: "
                 "`cordon policy import srt FILE` converts srt settings to a cordon policy");
    }
    return srt.empty() ? Format::Cordon : Format::Srt;
  }
  if (json_depth(text) <= kMaxInputDepth && parses_as_toml(text)) {
    return Format::Codex;
  }
  return ends_with(source, ".toml") ? Format::Codex : Format::Cordon;
}

void settle(ImportResult& r, const std::string& source, const LoadOptions& lo) {
  LoadOptions o = lo;
  o.source_name = source + " (imported)";
  if (o.home.empty()) {
    const char* h = std::getenv("HOME");
    o.home = h != nullptr ? h : "";  // as the loader expands "~"
  }
  harden_denies(r, source, o.home);
  // Each pass removes one entry, so there are at most as many passes as entries (plus one).
  const size_t passes = r.origin.size() + 1;
  for (size_t pass = 0; pass < passes; ++pass) {
    try {
      (void)parse_policy(r.policy.dump(), o);
      return;
    } catch (const PolicyError& e) {
      const std::string& path = e.field_path();
      size_t open = path.rfind('[');
      if (open != std::string::npos && path.back() == ']' && path.find('[') == open) {
        std::string list_path = path.substr(0, open);
        size_t index = std::strtoul(path.c_str() + open + 1, nullptr, 10);
        ojson* list = find_path(r.policy, list_path);
        if (list != nullptr && list->is_array() && index < list->size()) {
          std::string value = (*list)[index].dump();
          if (is_deny_list(list_path)) {
            const std::string key = list_path + "[" + std::to_string(index) + "]";
            refuse_deny(source, r.origin.count(key) ? r.origin[key] : list_path, value,
                        bare_message(e));
          }
          std::string from = remove_element(r, *list, list_path, index);
          r.unmapped.push_back({from, value + " is not accepted by cordon: " + bare_message(e)});
          continue;
        }
      }
      if (r.origin.count(path) != 0) {
        std::string parent = path.substr(0, path.rfind('.'));
        ojson* section = find_path(r.policy, parent);
        if (section != nullptr && section->is_object()) {
          r.unmapped.push_back({r.origin[path], "not accepted by cordon: " + bare_message(e)});
          section->erase(path.substr(path.rfind('.') + 1));
          r.origin.erase(path);
          continue;
        }
      }
      refuse(source, "",
             std::string("the imported policy is refused by cordon's loader (") + e.what() +
                 "); please report this");
    }
  }
  refuse(source, "", "the imported policy could not be settled; please report this");
}

namespace {

void render_value(const ojson& v, const std::string& path, const ImportResult& r, int indent,
                  std::string& out) {
  auto comment = [&](const std::string& p) {
    auto it = r.origin.find(p);
    if (it == r.origin.end()) {
      return std::string();
    }
    // Input keys can hold any character; a line break must not end the comment early.
    std::string c = "  // from " + it->second;
    std::replace_if(
        c.begin(), c.end(), [](char x) { return x == '\n' || x == '\r'; }, ' ');
    return c;
  };
  const std::string pad(static_cast<size_t>(indent) * 2, ' ');
  const std::string inner(static_cast<size_t>(indent + 1) * 2, ' ');
  if (v.is_object() && !v.empty()) {
    out += "{\n";
    size_t i = 0;
    for (const auto& [k, x] : v.items()) {
      std::string p = path.empty() ? k : path + "." + k;
      out += inner + ojson(k).dump() + ": ";
      render_value(x, p, r, indent + 1, out);
      out += (++i < v.size() ? "," : "") + comment(p) + "\n";
    }
    out += pad + "}";
  } else if (v.is_array() && !v.empty()) {
    out += "[\n";
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = path + "[" + std::to_string(i) + "]";
      out += inner;
      render_value(v[i], p, r, indent + 1, out);
      out += (i + 1 < v.size() ? "," : "") + comment(p) + "\n";
    }
    out += pad + "]";
  } else {
    out += v.dump();
  }
}

// One `//` comment line: newlines in input keys or values cannot end the comment early.
std::string comment_line(std::string_view text) {
  std::string out = "// ";
  for (char c : text) {
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return out + "\n";
}

}  // namespace

std::string render(const ImportResult& r, const std::string& source, std::string_view format_name) {
  std::string out;
  out += comment_line("Imported by `cordon policy import` from " + source + " (" +
                      std::string(format_name) + "): " + std::to_string(r.settings) +
                      " settings, " + std::to_string(r.unmapped.size()) + " without equivalent.");
  if (!r.notes.empty()) {
    out += "// Taken into account without an entry of their own:\n";
    for (const auto& n : r.notes) {
      out += comment_line("  " + n);
    }
  }
  if (!r.unmapped.empty()) {
    out += "// Without equivalent in cordon (not applied):\n";
    for (const auto& u : r.unmapped) {
      out += comment_line("  " + u.key + ": " + u.why);
    }
  }
  // The sections in the order of cordon's own policy files.
  ojson ordered = ojson::object();
  for (const char* k : {"version", "extends", "network", "filesystem", "process", "record"}) {
    if (r.policy.contains(k)) {
      ordered[k] = r.policy[k];
    }
  }
  for (const auto& [k, v] : r.policy.items()) {
    if (!ordered.contains(k)) {
      ordered[k] = v;
    }
  }
  std::string body;
  render_value(ordered, "", r, 0, body);
  return out + (r.policy.empty() ? "{}" : body) + "\n";
}

std::string report(const ImportResult& r, const std::string& source, std::string_view format_name) {
  std::string out = "cordon: imported " + source + " (" + std::string(format_name) +
                    "): " + std::to_string(r.settings) + " settings, " +
                    std::to_string(r.unmapped.size()) + " without equivalent\n";
  for (const auto& u : r.unmapped) {
    std::string line = "  " + u.key + ": " + u.why;
    for (char& c : line) {
      if (c == '\n' || c == '\r') {
        c = ' ';
      }
    }
    out += line + "\n";
  }
  return out;
}

std::string_view format_name(Format f) {
  switch (f) {
    case Format::Srt:
      return "sandbox-runtime settings";
    case Format::Codex:
      return "Codex config.toml";
    case Format::Cordon:
      break;
  }
  return "cordon policy";
}

std::string_view format_command(Format f) { return f == Format::Codex ? "codex" : "srt"; }

ImportResult import_text(Format f, std::string_view text, const std::string& source,
                         const std::string& profile, const LoadOptions& lo) {
  if (text.size() > kMaxInputBytes) {
    refuse(source, "", "is larger than 1 MiB; a settings file is far smaller");
  }
  ImportResult r =
      f == Format::Codex ? import_codex(text, source, profile) : import_srt(text, source);
  settle(r, source, lo);
  return r;
}

ImportResult import_file(Format f, const std::string& path, const std::string& profile,
                         const LoadOptions& lo) {
  return import_text(f, read_input_file(path), path, profile, lo);
}

Policy load_policy_or_import(const std::string& path, const LoadOptions& lo,
                             std::optional<std::string>* said) {
  std::string text;
  try {
    text = read_input_file(path);
  } catch (const PolicyError&) {
    return load_policy_file(path, lo);  // its own messages for a missing or unreadable file
  }
  Format f = detect_format(text, path);
  if (f == Format::Cordon) {
    return load_policy_file(path, lo);
  }
  ImportResult r = import_text(f, text, path, "", lo);
  if (said != nullptr) {
    *said = path + " is a " +
            (f == Format::Srt ? std::string("sandbox-runtime settings file")
                              : std::string("Codex config.toml")) +
            "; imported it (" + std::to_string(r.settings) + " settings, " +
            std::to_string(r.unmapped.size()) + " without equivalent: see `cordon policy import " +
            std::string(format_command(f)) + " " + path + "`)";
  }
  LoadOptions o = lo;
  o.source_name = path + " (imported)";
  return parse_policy(render(r, path, format_name(f)), o);
}

}  // namespace cordon::policy::import
