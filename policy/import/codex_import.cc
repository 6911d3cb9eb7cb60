// Codex config.toml -> cordon policy, key by key (the table is in docs/policy-import.md).
#include "policy/import/codex_import.h"

#include <toml++/toml.h>

#include <algorithm>
#include <set>

namespace cordon::policy::import {
namespace {

constexpr const char* kFormat = "Codex's config.toml";

// Codex keys that configure the model, the UI or the agent rather than its sandbox.
constexpr const char* kNotSandbox[] = {"model",
                                       "review_model",
                                       "model_provider",
                                       "model_providers",
                                       "model_context_window",
                                       "model_auto_compact_token_limit",
                                       "model_max_output_tokens",
                                       "model_reasoning_effort",
                                       "model_reasoning_summary",
                                       "model_verbosity",
                                       "model_supports_reasoning_summaries",
                                       "approvals_reviewer",
                                       "file_opener",
                                       "hide_agent_reasoning",
                                       "show_raw_agent_reasoning",
                                       "history",
                                       "tui",
                                       "notify",
                                       "instructions",
                                       "developer_instructions",
                                       "experimental_instructions_file",
                                       "model_instructions_file",
                                       "project_doc_max_bytes",
                                       "project_doc_fallback_filenames",
                                       "projects",
                                       "mcp_servers",
                                       "tools",
                                       "features",
                                       "otel",
                                       "disable_response_storage",
                                       "preferred_auth_method",
                                       "forced_login_method",
                                       "forced_chatgpt_workspace_id",
                                       "cli_auth_credentials_store",
                                       "chatgpt_base_url",
                                       "openai_base_url",
                                       "windows_wsl_setup_acknowledged",
                                       "hooks",
                                       "web_search",
                                       "check_for_update_on_startup",
                                       "personality",
                                       "analytics",
                                       "feedback",
                                       "notice",
                                       "oss_provider",
                                       "model_catalog_json",
                                       "agents",
                                       "skills",
                                       "windows"};

// A key as TOML writes it in a dotted path: bare when it can be, else quoted, so that
// `filesystem.":workspace_roots"."."` names one key unambiguously.
std::string toml_key(std::string_view k) {
  bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
  if (bare) {
    return std::string(k);
  }
  std::string out = "\"";
  for (char c : k) {
    if (c == '"' || c == '\\') {
      out += '\\';
    }
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return out + "\"";
}

std::string join(const std::string& a, std::string_view b) {
  return a.empty() ? toml_key(b) : a + "." + toml_key(b);
}

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a number";
    case toml::node_type::boolean:
      return "a boolean";
    default:
      return "a date or time";
  }
}

bool valid_env_name(std::string_view s) {
  if (s.empty() || s.size() > 256 || (s[0] >= '0' && s[0] <= '9')) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// Checks what toml++ must not be handed, strings and comments skipped: bracket nesting and
// dotted keys (each part a nested table) deeper than kMaxInputDepth, which its recursion and the
// tables it builds would follow; and non-ASCII bytes, which TOML allows only in strings and
// comments, and which toml++ 3.3 mishandles elsewhere (its non-ASCII whitespace test reaches
// __builtin_unreachable for most code points: undefined behaviour on hostile input). Returns
// why the text is refused, or "" when it may be parsed.
std::string toml_precheck(std::string_view text) {
  int depth = 0;
  int dots = 0;
  size_t line = 1;
  auto at_line = [&] { return "line " + std::to_string(line) + ": "; };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"' || c == '\'') {
      const bool multi = text.substr(i, 3) == std::string(3, c);
      const std::string close = multi ? std::string(3, c) : std::string(1, c);
      for (i += multi ? 3 : 1; i < text.size(); ++i) {
        if (text[i] == '\n') {
          if (!multi) {
            break;  // an unterminated string: the parser says so
          }
          ++line;
        } else if (c == '"' && text[i] == '\\') {
          ++i;
        } else if (text.substr(i, close.size()) == close) {
          i += close.size() - 1;
          // Up to two more quotes right before a multi-line string's end are its content
          // (`"""a"""""` holds `a""`): the region ends after the whole run, as TOML says.
          for (int extra = 0; multi && extra < 2 && i + 1 < text.size() && text[i + 1] == c;
               ++extra) {
            ++i;
          }
          break;
        }
      }
      if (i < text.size() && text[i] == '\n') {
        ++line;
        dots = 0;
      }
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') {
        ++i;
      }
    } else if (c == '\n') {
      ++line;
      dots = 0;
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      return at_line() + "a non-ASCII character outside a string or comment is not valid TOML";
    } else if (c == '.' && ++dots > kMaxInputDepth) {
      return at_line() + "a key of more than " + std::to_string(kMaxInputDepth) +
             " dotted parts; a Codex config.toml is a few levels deep";
    } else if ((c == '[' || c == '{') && ++depth > kMaxInputDepth) {
      return at_line() + "nested deeper than " + std::to_string(kMaxInputDepth) +
             " levels; a Codex config.toml is a few levels deep";
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return "";
}

class CodexReader {
 public:
  CodexReader(std::string source, std::string profile)
      : source_(std::move(source)), profile_(std::move(profile)) {}

  ImportResult run(const toml::table& root) {
    select_profile(root);
    // The settings in force: the top level, with the selected [profiles.NAME] over it.
    std::vector<std::pair<std::string, const toml::node*>> keys;
    std::map<std::string, std::string> from;
    for (const auto& [k, v] : root) {
      keys.emplace_back(std::string(k.str()), &v);
      from[std::string(k.str())] = toml_key(k.str());
    }
    if (selected_ != nullptr) {
      for (const auto& [k, v] : *selected_) {
        std::string key(k.str());
        std::string path = join(join("profiles", profile_), key);
        auto it = std::find_if(keys.begin(), keys.end(), [&](auto& e) { return e.first == key; });
        if (it != keys.end()) {
          r_.note(from[key], "overridden by " + path);
          it->second = &v;
        } else {
          keys.emplace_back(key, &v);
        }
        from[key] = path;
      }
    }
    auto find = [&](std::string_view key) -> const toml::node* {
      for (auto& [k, v] : keys) {
        if (k == key) {
          return v;
        }
      }
      return nullptr;
    };
    const toml::node* mode = find("sandbox_mode");
    const toml::node* permissions = find("default_permissions");
    if (mode != nullptr) {
      mode_ = string(*mode, from["sandbox_mode"]);  // [sandbox_workspace_write] depends on it
    }
    // default_permissions first: [permissions] is read according to it, wherever it was set.
    if (permissions != nullptr) {
      if (mode != nullptr) {
        r_.skip(from["default_permissions"],
                "Codex ignores it while sandbox_mode is set (and so does the import)");
      } else {
        default_permissions(*permissions, from["default_permissions"], root);
      }
    }
    for (const auto& [key, node] : keys) {
      const std::string& p = from[key];
      if (key == "sandbox_mode") {
        sandbox_mode(*node, p);
      } else if (key == "sandbox_workspace_write") {
        workspace_write(*node, p);
      } else if (key == "default_permissions") {
        continue;  // read above
      } else if (key == "permissions") {
        permission_tables(*node, p, mode == nullptr ? permissions : nullptr);
      } else if (key == "shell_environment_policy") {
        shell_environment(*node, p);
      } else if (key == "profile") {
        r_.note(p,
                profile_.empty() ? "no profile selected" : "selects [profiles." + profile_ + "]");
      } else if (key == "profiles") {
        other_profiles(*node, p);
      } else if (key == "approval_policy") {
        r_.skip(p, "cordon never asks for approval: what the policy does not grant is refused");
      } else if (std::find(std::begin(kNotSandbox), std::end(kNotSandbox), key) !=
                 std::end(kNotSandbox)) {
        r_.skip(p, "not a sandbox setting (model, provider, UI or agent): nothing to enforce");
      } else {
        r_.unknown(p, kFormat);
      }
    }
    return std::move(r_);
  }

 private:
  [[noreturn]] void wrong_type(const toml::node& n, const std::string& path,
                               const std::string& expected) const {
    refuse(source_, path, "expected " + expected + ", got " + type_name(n));
  }
  const toml::table& table(const toml::node& n, const std::string& path) const {
    if (!n.is_table()) {
      wrong_type(n, path, "a table");
    }
    return *n.as_table();
  }
  std::string string(const toml::node& n, const std::string& path) const {
    if (!n.is_string()) {
      wrong_type(n, path, "a string");
    }
    return **n.as_string();
  }
  bool boolean(const toml::node& n, const std::string& path) const {
    if (!n.is_boolean()) {
      wrong_type(n, path, "true or false");
    }
    return **n.as_boolean();
  }
  std::vector<std::string> strings(const toml::node& n, const std::string& path) const {
    if (!n.is_array()) {
      wrong_type(n, path, "an array of strings");
    }
    std::vector<std::string> out;
    const auto& a = *n.as_array();
    for (size_t i = 0; i < a.size(); ++i) {
      out.push_back(string(a[i], path + "[" + std::to_string(i) + "]"));
    }
    return out;
  }

  void select_profile(const toml::table& root) {
    if (profile_.empty()) {
      if (const toml::node* p = root.get("profile")) {
        profile_ = string(*p, "profile");
      }
    }
    if (profile_.empty()) {
      return;
    }
    const toml::node* profiles = root.get("profiles");
    if (profiles != nullptr) {
      if (const toml::node* s = table(*profiles, "profiles").get(profile_)) {
        selected_ = &table(*s, join("profiles", profile_));
        return;
      }
    }
    std::string names;
    if (profiles != nullptr) {
      for (const auto& [k, v] : *profiles->as_table()) {
        (void)v;
        names += (names.empty() ? "" : ", ") + std::string(k.str());
      }
    }
    refuse(source_, join("profiles", profile_),
           "no such profile" +
               (names.empty() ? std::string("; the file defines none")
                              : "; the file defines: " + names) +
               " (choose one with --profile NAME)");
  }

  void other_profiles(const toml::node& n, const std::string& path) {
    for (const auto& [k, v] : table(n, path)) {
      (void)v;
      std::string name(k.str());
      if (selected_ == nullptr || name != profile_) {
        r_.skip(join(path, name), "a profile not selected (choose it with --profile " + name + ")");
      } else {
        ++r_.settings;  // its keys were read as the settings in force
      }
    }
  }

  void sandbox_mode(const toml::node& n, const std::string& path) {
    mode_ = string(n, path);
    if (mode_ == "read-only") {
      r_.set("filesystem.mode", "ro", path);
    } else if (mode_ == "workspace-write") {
      r_.set("filesystem.mode", "cow", path);
    } else if (mode_ == "danger-full-access") {
      r_.skip(path,
              "cordon always sandboxes; the defaults stay (no network, workspace "
              "copy-on-write): grant hosts and paths explicitly");
    } else {
      refuse(source_, path,
             "\"" + mode_ +
                 "\" is not a sandbox mode (accepted: read-only, workspace-write, "
                 "danger-full-access)");
    }
  }

  void workspace_write(const toml::node& n, const std::string& path) {
    for (const auto& [k, v] : table(n, path)) {
      std::string key(k.str());
      std::string p = join(path, key);
      if (mode_ != "workspace-write" && !mode_.empty()) {
        ++r_.settings;
        r_.unmapped.push_back({p, "applies only with sandbox_mode = \"workspace-write\""});
        continue;
      }
      if (key == "writable_roots") {
        auto roots = strings(v, p);
        if (roots.empty()) {
          r_.note(p, "empty: nothing to add");
        }
        for (size_t i = 0; i < roots.size(); ++i) {
          r_.add("filesystem.write", roots[i], p + "[" + std::to_string(i) + "]");
        }
      } else if (key == "network_access") {
        if (boolean(v, p)) {
          r_.add("network.allow", "*", p);
        } else {
          r_.note(p, "false: no network, as in cordon's default");
        }
      } else if (key == "exclude_tmpdir_env_var" || key == "exclude_slash_tmp") {
        (void)boolean(v, p);
        r_.note(p, "the sandbox's /tmp is its own tmpfs (filesystem.tmp), never the host's");
      } else {
        r_.unknown(p, kFormat);
      }
    }
  }

  void default_permissions(const toml::node& n, const std::string& path, const toml::table& root) {
    std::string name = string(n, path);
    if (builtin_profile(name, path)) {
      return;
    }
    const toml::node* perms = root.get("permissions");
    if (perms == nullptr || table(*perms, "permissions").get(name) == nullptr) {
      refuse(source_, path,
             "\"" + name + "\" names no [permissions." + name +
                 "] table and no built-in profile (:read-only, :workspace, "
                 ":danger-full-access)");
    }
    r_.note(path, "selects [permissions." + name + "]");
    permissions_name_ = name;
  }

  // :read-only, :workspace, :danger-full-access. Returns false for a user-defined name.
  bool builtin_profile(const std::string& name, const std::string& path) {
    if (name == ":read-only") {
      r_.set("filesystem.mode", "ro", path);
    } else if (name == ":workspace") {
      r_.set("filesystem.mode", "cow", path);
    } else if (name == ":danger-full-access") {
      r_.skip(path,
              "cordon always sandboxes; the defaults stay: grant hosts and paths "
              "explicitly");
    } else {
      return false;
    }
    return true;
  }

  void permission_tables(const toml::node& n, const std::string& path, const toml::node* selected) {
    const toml::table& t = table(n, path);
    std::set<std::string> done;
    if (selected != nullptr && !permissions_name_.empty()) {
      permission_profile(t, permissions_name_, path, 0, done);
    }
    for (const auto& [k, v] : t) {
      (void)v;
      std::string name(k.str());
      if (done.count(name) == 0) {
        r_.skip(join(path, name),
                selected == nullptr && !mode_.empty()
                    ? "Codex ignores permission profiles while sandbox_mode is set"
                    : "a permission profile default_permissions does not select");
      }
    }
  }

  void permission_profile(const toml::table& all, const std::string& name, const std::string& base,
                          int depth, std::set<std::string>& done) {
    std::string path = join(base, name);
    if (depth > 8 || done.count(name) != 0) {
      refuse(source_, path, "extends itself, directly or through other profiles");
    }
    done.insert(name);
    const toml::node* n = all.get(name);
    if (n == nullptr) {
      refuse(source_, path, "no such permission profile");
    }
    const toml::table& t = table(*n, path);
    // The parent first, so the child's entries come after (and the child's mode wins).
    if (const toml::node* e = t.get("extends")) {
      std::string parent = string(*e, join(path, "extends"));
      if (!builtin_profile(parent, join(path, "extends"))) {
        r_.note(join(path, "extends"), "includes [permissions." + parent + "]");
        permission_profile(all, parent, base, depth + 1, done);
      }
    }
    std::vector<std::string> roots;
    if (const toml::node* w = t.get("workspace_roots")) {
      std::string p = join(path, "workspace_roots");
      for (const auto& [k, v] : table(*w, p)) {
        if (boolean(v, join(p, k.str()))) {
          roots.emplace_back(k.str());
        } else {
          r_.note(join(p, k.str()), "false: not a workspace root");
        }
      }
    }
    std::string roots_access = "write";  // what :workspace_roots grants the extra roots
    for (const auto& [k, v] : t) {
      std::string key(k.str());
      std::string p = join(path, key);
      if (key == "extends" || key == "workspace_roots") {
        continue;
      } else if (key == "filesystem") {
        for (const auto& [fk, fv] : table(v, p)) {
          filesystem_entry(std::string(fk.str()), fv, join(p, fk.str()), roots_access);
        }
      } else if (key == "network") {
        profile_network(v, p);
      } else {
        r_.unknown(p, kFormat);
      }
    }
    for (size_t i = 0; i < roots.size(); ++i) {
      std::string p = join(join(path, "workspace_roots"), roots[i]);
      if (roots_access == "write") {
        r_.add("filesystem.write", roots[i], p);
      } else if (roots_access == "read") {
        r_.add("filesystem.read", roots[i], p);
      } else {
        r_.skip(p, ":workspace_roots grants it no access");
      }
    }
  }

  std::string access(const toml::node& n, const std::string& path) const {
    std::string a = string(n, path);
    if (a != "read" && a != "write" && a != "deny" && a != "none") {
      refuse(source_, path, "\"" + a + "\" is not an access (accepted: read, write, deny, none)");
    }
    return a;
  }

  void filesystem_entry(const std::string& key, const toml::node& v, const std::string& p,
                        std::string& roots_access) {
    if (key == ":workspace_roots") {
      if (v.is_table()) {
        for (const auto& [sk, sv] : *v.as_table()) {
          workspace_subpath(std::string(sk.str()), access(sv, join(p, sk.str())), join(p, sk.str()),
                            roots_access);
        }
      } else {
        workspace_subpath(".", access(v, p), p, roots_access);
      }
    } else if (key == ":minimal") {
      (void)access(v, p);
      r_.note(p, "cordon always shows the system directories read-only");
    } else if (key == ":tmpdir" || key == ":slash_tmp") {
      (void)access(v, p);
      r_.note(p, "the sandbox's /tmp is its own tmpfs (filesystem.tmp)");
    } else if (key == ":root") {
      (void)access(v, p);
      r_.skip(p,
              "cordon never shows the whole host filesystem: grant paths with "
              "filesystem.read / filesystem.write");
    } else if (key == "glob_scan_max_depth") {
      r_.note(p, "cordon's `**` patterns match at any depth");
    } else if (!key.empty() && (key[0] == '/' || key[0] == '~')) {
      std::string a = access(v, p);
      r_.add(a == "read"    ? "filesystem.read"
             : a == "write" ? "filesystem.write"
                            : "filesystem.deny",
             key, p);
    } else {
      r_.unknown(p, kFormat);
    }
  }

  void workspace_subpath(const std::string& sub, const std::string& a, const std::string& p,
                         std::string& roots_access) {
    if (sub == "." || sub.empty()) {
      roots_access = a;
      if (a == "write") {
        r_.set("filesystem.mode", "cow", p);
      } else if (a == "read") {
        r_.set("filesystem.mode", "ro", p);
      } else {
        // Dropping it would show a workspace the file hid: the import must not be weaker.
        refuse(source_, p,
               "\"" + a +
                   "\" makes the workspace unreachable, and cordon always shows the workspace: "
                   "run cordon in a directory the program may see (or deny paths inside it: "
                   "\":workspace_roots\" = { \"secrets\" = \"deny\" })");
      }
    } else if (a == "read") {
      r_.add("filesystem.deny_write", sub, p);
    } else if (a == "deny" || a == "none") {
      r_.add("filesystem.deny", sub, p);
    } else {
      r_.note(p, "the workspace is writable (copy-on-write)");
    }
  }

  void profile_network(const toml::node& n, const std::string& path) {
    const toml::table& t = table(n, path);
    bool enabled = false;
    if (const toml::node* e = t.get("enabled")) {
      enabled = boolean(*e, join(path, "enabled"));
    }
    bool any_allow = false;
    for (const auto& [k, v] : t) {
      std::string key(k.str());
      std::string p = join(path, key);
      if (key == "enabled") {
        if (!enabled) {
          r_.note(p, "false: no network, as in cordon's default");
        } else {
          ++r_.settings;
        }
      } else if (key == "domains") {
        for (const auto& [dk, dv] : table(v, p)) {
          std::string dp = join(p, dk.str());
          std::string a = string(dv, dp);
          if (a != "allow" && a != "deny") {
            refuse(source_, dp, "\"" + a + "\" is not a rule (accepted: allow, deny)");
          }
          if (a == "allow" && !enabled) {
            r_.skip(dp, "network.enabled is not true, so Codex allows nothing");
            continue;
          }
          any_allow = any_allow || a == "allow";
          domain(std::string(dk.str()), a == "allow" ? "network.allow" : "network.deny", dp);
        }
      } else {
        r_.skip(p, "no equivalent in cordon's network settings");
      }
    }
    if (enabled && !any_allow) {
      r_.add("network.allow", "*", join(path, "enabled"));
      --r_.settings;  // counted with `enabled`
    }
  }

  // "**.example.com" is the name and every name beneath it; cordon says that with two patterns.
  void domain(const std::string& d, const char* list, const std::string& from) {
    if (d.rfind("**.", 0) == 0) {
      r_.add(list, d.substr(3), from);
      r_.add(list, "*." + d.substr(3), from);
      --r_.settings;
    } else {
      r_.add(list, d, from);
    }
  }

  void shell_environment(const toml::node& n, const std::string& path) {
    for (const auto& [k, v] : table(n, path)) {
      std::string key(k.str());
      std::string p = join(path, key);
      if (key == "inherit") {
        std::string how = string(v, p);
        if (how == "core") {
          r_.note(p, "core: cordon passes only process.env.keep (PATH, HOME, LANG, TERM, ...)");
        } else if (how == "none") {
          r_.set("process.env.keep", nlohmann::ordered_json::array(), p);
        } else if (how == "all") {
          r_.skip(p,
                  "cordon passes only the variables process.env.keep names; add them there "
                  "or with --env-keep NAME");
        } else {
          refuse(source_, p, "\"" + how + "\" is not accepted (accepted: all, core, none)");
        }
      } else if (key == "ignore_default_excludes") {
        if (boolean(v, p)) {
          r_.skip(p,
                  "cordon's process.env.deny defaults (*TOKEN*, *SECRET*, ...) stay; pass "
                  "one variable with --env-pass NAME");
        } else {
          r_.note(p, "false: cordon's process.env.deny defaults stay too");
        }
      } else if (key == "exclude") {
        auto globs = strings(v, p);
        if (globs.empty()) {
          r_.note(p, "empty: nothing to add");
        }
        for (size_t i = 0; i < globs.size(); ++i) {
          r_.add("process.env.deny", globs[i], p + "[" + std::to_string(i) + "]");
        }
      } else if (key == "include_only") {
        auto names = strings(v, p);
        if (std::none_of(names.begin(), names.end(), valid_env_name)) {
          // Only these: none, or only patterns cordon cannot keep; never cordon's defaults.
          r_.set("process.env.keep", nlohmann::ordered_json::array(), p);
          if (!names.empty()) {
            --r_.settings;  // the entries below are counted one by one
          }
        }
        for (size_t i = 0; i < names.size(); ++i) {
          std::string ip = p + "[" + std::to_string(i) + "]";
          if (valid_env_name(names[i])) {
            r_.add("process.env.keep", names[i], ip);
          } else {
            r_.skip(ip, "process.env.keep takes exact names, not patterns");
          }
        }
      } else if (key == "set") {
        for (const auto& [sk, sv] : table(v, p)) {
          std::string name(sk.str());
          std::string sp = join(p, name);
          if (!valid_env_name(name)) {
            r_.skip(sp, "not a variable name cordon can set");
            continue;
          }
          r_.set("process.env.set." + name, string(sv, sp), sp);
        }
      } else if (key == "experimental_use_profile") {
        r_.skip(p, "cordon does not run a login shell profile");
      } else {
        r_.unknown(p, kFormat);
      }
    }
  }

  std::string source_;
  std::string profile_;
  const toml::table* selected_ = nullptr;
  std::string mode_;
  std::string permissions_name_;
  ImportResult r_;
};

// Parses TOML that passed toml_precheck(). A copy with every non-ASCII byte replaced by 'x' is
// parsed first: only when that copy is valid TOML is the text itself handed to toml++, which
// then takes the same path through it, meeting the non-ASCII bytes only where 'x' was accepted
// (strings and comments: toml_precheck() refused them anywhere else). An invalid document thus
// never walks toml++ into its non-ASCII whitespace test. Throws toml::parse_error.
toml::table parse_toml(std::string_view text, std::string_view source) {
  std::string ascii(text);
  for (char& c : ascii) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      c = 'x';
    }
  }
  (void)toml::parse(ascii, source);
  return toml::parse(text, source);
}

}  // namespace

bool parses_as_toml(std::string_view text) {
  if (!toml_precheck(text).empty()) {
    return false;
  }
  try {
    (void)parse_toml(text, "");
    return true;
  } catch (const toml::parse_error&) {
    return false;
  }
}

ImportResult import_codex(std::string_view text, const std::string& source,
                          const std::string& profile) {
  if (std::string why = toml_precheck(text); !why.empty()) {
    refuse(source, "", "is not accepted as TOML: " + why + " (is this the right file?)");
  }
  toml::table root;
  try {
    root = parse_toml(text, source);
  } catch (const toml::parse_error& e) {
    refuse(source, "",
           "is not valid TOML: line " + std::to_string(e.source().begin.line) + ", column " +
               std::to_string(e.source().begin.column) + ": " + std::string(e.description()) +
               " (a Codex config.toml is TOML)");
  }
  return CodexReader(source, profile).run(root);
}

}  // namespace cordon::policy::import
