// sandbox-runtime settings -> cordon policy, key by key (the table is in docs/policy-import.md).
#include "policy/import/srt_import.h"

#include <algorithm>
#include <array>

namespace cordon::policy::import {
namespace {

using json = nlohmann::json;
constexpr const char* kFormat = "sandbox-runtime";

// srt write-protects these beneath every writable path, whatever allowWrite says (its
// "mandatory deny" list): files that run code later (shell rc files, git and editor settings).
constexpr std::array<const char*, 9> kMandatoryFiles = {
    ".gitconfig", ".gitmodules", ".bashrc",    ".bash_profile", ".zshrc",
    ".zprofile",  ".profile",    ".ripgreprc", ".mcp.json"};
constexpr std::array<const char*, 5> kMandatoryDirs = {".vscode", ".idea", ".claude/commands",
                                                       ".claude/agents", ".git/hooks"};

// What each srt key without a cordon equivalent is, so the report can say why.
struct NoEquivalent {
  const char* key;
  const char* why;
};
constexpr NoEquivalent kTopNoEquivalent[] = {
    {"ignoreViolations",
     "cordon records every refusal and has no way to silence some; `cordon log` filters them"},
    {"enableWeakerNestedSandbox",
     "cordon has no weaker mode for Docker; where namespaces are missing see `cordon run "
     "--no-namespaces` (advisory)"},
    {"enableWeakerNetworkIsolation", "macOS only (trustd access)"},
    {"allowAppleEvents", "macOS only"},
    {"allowPty", "macOS only; cordon always gives the program a terminal when it has one"},
    {"ripgrep", "srt's own file search; cordon needs none"},
    {"mandatoryDenySearchDepth",
     "cordon's `**` patterns match at any depth, so the protections need no depth"},
    {"seccomp", "srt's helper binary paths; cordon builds its own seccomp filter"},
    {"bwrapPath", "srt's helper binary; cordon does not use bubblewrap"},
    {"socatPath", "srt's helper binary; cordon does not use socat"},
    {"javaAgentJarPath",
     "cordon captures the JVM's connections in the kernel; no Java agent is needed"},
    {"windows", "Windows only"},
    {"git", "cordon does not set git configuration in the sandbox"},
};
constexpr NoEquivalent kNetworkNoEquivalent[] = {
    {"deniedDomainReasons",
     "cordon's refusals name the rule that refused (e.g. network.deny[0]); no custom text"},
    {"allowUnixSockets", "macOS only (and ignored by srt on Linux)"},
    {"allowAllUnixSockets",
     "cordon does not filter Unix sockets; the sandbox sees only its own and granted paths"},
    {"allowMachLookup", "macOS only"},
    {"httpProxyPort", "cordon always runs its own proxy; an external one cannot replace it"},
    {"socksProxyPort", "cordon always runs its own proxy; an external one cannot replace it"},
    {"mitmProxy", "cordon cannot hand connections to another proxy"},
    {"parentProxy", "cordon's proxy dials the destination itself; no upstream proxy"},
    {"filterRequest", "a JavaScript callback; use network.rules for method and path rules"},
};

const char* no_equivalent(const NoEquivalent* table, size_t n, std::string_view key) {
  for (size_t i = 0; i < n; ++i) {
    if (key == table[i].key) {
      return table[i].why;
    }
  }
  return nullptr;
}

std::string join(const std::string& a, std::string_view b) {
  return a.empty() ? std::string(b) : a + "." + std::string(b);
}
std::string index(const std::string& a, size_t i) { return a + "[" + std::to_string(i) + "]"; }

std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

class SrtReader {
 public:
  explicit SrtReader(std::string source) : source_(std::move(source)) {}

  ImportResult run(const json& root) {
    expect_object(root, "", "the settings object");
    for (const auto& [key, v] : root.items()) {
      if (key == "network") {
        network(v, key);
      } else if (key == "filesystem") {
        filesystem(v, key);
      } else if (key == "credentials") {
        credentials(v, key);
      } else if (const char* why =
                     no_equivalent(kTopNoEquivalent, std::size(kTopNoEquivalent), key)) {
        skip_unless_false(v, key, why);
      } else {
        r_.unknown(key, kFormat);
      }
    }
    mandatory_denies();
    return std::move(r_);
  }

 private:
  void expect_object(const json& v, const std::string& path, const char* what) const {
    if (!v.is_object()) {
      refuse(source_, path, std::string("expected ") + what + " (a JSON object), got " + show(v));
    }
  }
  bool get_bool(const json& v, const std::string& path) const {
    if (!v.is_boolean()) {
      refuse(source_, path, "expected true or false, got " + show(v));
    }
    return v.get<bool>();
  }
  std::vector<std::string> get_strings(const json& v, const std::string& path,
                                       const char* what) const {
    if (!v.is_array()) {
      refuse(source_, path,
             std::string("expected a list of ") + what + " (e.g. [\"...\"]), got " + show(v));
    }
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string() || v[i].get_ref<const std::string&>().empty()) {
        refuse(source_, index(path, i),
               std::string("expected ") + what + " as a non-empty string, got " + show(v[i]));
      }
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }

  // An empty list is a setting too: it is counted and said, not passed over.
  void note_if_empty(const std::vector<std::string>& list, const std::string& path) {
    if (list.empty()) {
      r_.note(path, "empty: nothing to add");
    }
  }

  // A switch left off asks for nothing cordon lacks; any other value is listed with `why`.
  void skip_unless_false(const json& v, const std::string& path, const char* why) {
    if (v.is_boolean() && !v.get<bool>()) {
      r_.note(path, "false: nothing to apply");
    } else {
      r_.skip(path, why);
    }
  }

  // "[::1]" -> "::1": cordon writes IPv6 in brackets only when a port follows.
  static std::string host_pattern(const std::string& s) {
    if (s.size() > 2 && s.front() == '[' && s.back() == ']') {
      return s.substr(1, s.size() - 2);
    }
    return s;
  }

  void network(const json& v, const std::string& path) {
    expect_object(v, path, "the network settings");
    for (const auto& [key, x] : v.items()) {
      std::string p = join(path, key);
      if (key == "allowedDomains") {
        auto list = get_strings(x, p, "domains");
        if (list.empty()) {
          r_.note(p, "empty: no network, as in cordon's default");
        }
        for (size_t i = 0; i < list.size(); ++i) {
          r_.add("network.allow", host_pattern(list[i]), index(p, i));
        }
      } else if (key == "deniedDomains") {
        auto list = get_strings(x, p, "domains");
        note_if_empty(list, p);
        for (size_t i = 0; i < list.size(); ++i) {
          r_.add("network.deny", host_pattern(list[i]), index(p, i));
        }
      } else if (key == "strictAllowlist") {
        bool strict = get_bool(x, p);
        if (strict) {
          r_.note(p, "cordon never asks: a host not in network.allow is always refused");
        } else {
          r_.skip(p, "cordon has no ask callback: a host not in network.allow is refused");
        }
      } else if (key == "allowLocalBinding") {
        bool allow = get_bool(x, p);
        if (allow) {
          r_.note(p, "the sandbox has its own loopback, where the program may listen");
        } else {
          r_.skip(p,
                  "cordon does not forbid listening inside the sandbox's own network "
                  "namespace (no one outside can connect to it)");
        }
      } else if (key == "tlsTerminate") {
        tls_terminate(x, p);
      } else if (const char* why =
                     no_equivalent(kNetworkNoEquivalent, std::size(kNetworkNoEquivalent), key)) {
        skip_unless_false(x, p, why);
      } else {
        r_.unknown(p, kFormat);
      }
    }
  }

  void tls_terminate(const json& v, const std::string& path) {
    expect_object(v, path, "the TLS termination settings");
    tls_terminate_ = true;
    for (const auto& [key, x] : v.items()) {
      std::string p = join(path, key);
      if (key == "caCertPath" || key == "caKeyPath") {
        if (!x.is_string()) {
          refuse(source_, p, "expected a file path string, got " + show(x));
        }
        r_.set(key == "caCertPath" ? "network.ca.cert" : "network.ca.key", x.get<std::string>(), p);
      } else if (key == "excludeDomains") {
        auto list = get_strings(x, p, "domains");
        for (size_t i = 0; i < list.size(); ++i) {
          r_.add("network.inspect_exclude", host_pattern(list[i]), index(p, i));
        }
      } else if (key == "extraCaCertPaths") {
        r_.skip(p,
                "cordon's sandbox trusts the host's bundle and the session CA; other CAs "
                "are not added");
      } else {
        r_.unknown(p, kFormat);
      }
    }
  }

  void filesystem(const json& v, const std::string& path) {
    expect_object(v, path, "the filesystem settings");
    // denyRead first: allowRead is read against it.
    if (const auto it = v.find("denyRead"); it != v.end()) {
      deny_read_ = get_strings(*it, join(path, "denyRead"), "paths");
    }
    for (const auto& [key, x] : v.items()) {
      std::string p = join(path, key);
      if (key == "denyRead") {
        note_if_empty(deny_read_, p);
        for (size_t i = 0; i < deny_read_.size(); ++i) {
          r_.add("filesystem.deny", deny_read_[i], index(p, i));
        }
      } else if (key == "allowRead") {
        auto list = get_strings(x, p, "paths");
        note_if_empty(list, p);
        for (size_t i = 0; i < list.size(); ++i) {
          allow_read(list[i], index(p, i));
        }
      } else if (key == "allowWrite") {
        auto list = get_strings(x, p, "paths");
        note_if_empty(list, p);
        for (size_t i = 0; i < list.size(); ++i) {
          allow_write(list[i], index(p, i));
        }
      } else if (key == "denyWrite") {
        auto list = get_strings(x, p, "paths");
        note_if_empty(list, p);
        for (size_t i = 0; i < list.size(); ++i) {
          r_.add("filesystem.deny_write", list[i], index(p, i));
        }
      } else if (key == "allowGitConfig") {
        allow_git_config_ = get_bool(x, p);
        r_.note(p, allow_git_config_ ? "true: .git/config is not write-protected"
                                     : "false: .git/config is write-protected");
      } else if (key == "disabled") {
        if (get_bool(x, p)) {
          r_.skip(p,
                  "cordon always enforces its filesystem view; the rules of this file are "
                  "imported as written");
        } else {
          r_.note(p, "false: the filesystem rules apply");
        }
      } else {
        r_.unknown(p, kFormat);
      }
    }
  }

  static bool beneath(const std::string& path, const std::string& dir) {
    std::string d = dir;
    while (d.size() > 1 && d.back() == '/') {
      d.pop_back();
    }
    return path == d || (path.rfind(d + "/", 0) == 0);
  }

  void allow_read(const std::string& path, const std::string& from) {
    for (const auto& d : deny_read_) {
      if (beneath(path, d)) {
        r_.skip(from, "re-allows reading inside denyRead " + d +
                          "; in cordon a deny always wins over an allow (narrow the deny "
                          "instead)");
        return;
      }
    }
    r_.add("filesystem.read", path, from);
  }

  void allow_write(const std::string& path, const std::string& from) {
    if (path == "." || path == "./") {
      r_.note(from,
              "the workspace (filesystem.workspace \".\") is writable in cow mode: the "
              "program's changes reach it by `cordon commit`");
      return;
    }
    if (path == "/tmp" || path == "/private/tmp" || path == "/tmp/" || path == "/private/tmp/") {
      r_.note(from, "the sandbox has its own writable /tmp (filesystem.tmp)");
      return;
    }
    if (path[0] != '/' && path[0] != '~') {
      r_.note(from, "relative paths are inside the workspace, which is writable in cow mode");
      return;
    }
    r_.add("filesystem.write", path, from);
    write_roots_.push_back(path);
  }

  void credentials(const json& v, const std::string& path) {
    expect_object(v, path, "the credentials settings");
    for (const auto& [key, x] : v.items()) {
      std::string p = join(path, key);
      if (key == "envVars") {
        credential_list(x, p, "name", "process.env.deny");
      } else if (key == "files") {
        credential_list(x, p, "path", "filesystem.deny");
      } else {
        r_.skip(p,
                "masking and re-signing are set per run in cordon: `cordon run --credential "
                "NAME=HOST` (network.credentials)");
      }
    }
  }

  // mode "deny" maps to a deny list; mode "mask" has cordon's --credential as its nearest.
  void credential_list(const json& v, const std::string& path, const char* name_key,
                       const char* deny_list) {
    if (!v.is_array()) {
      refuse(source_, path, "expected a list of objects, got " + show(v));
    }
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = index(path, i);
      expect_object(v[i], p, "a credential entry");
      const auto name = v[i].find(name_key);
      const auto mode = v[i].find("mode");
      if (name == v[i].end() || !name->is_string() || mode == v[i].end() || !mode->is_string()) {
        refuse(source_, p,
               std::string("expected {\"") + name_key +
                   "\": \"...\", \"mode\": \"deny\" | "
                   "\"mask\"}, got " +
                   show(v[i]));
      }
      if (*mode == "deny") {
        r_.add(deny_list, name->get<std::string>(), p);
      } else if (*mode == "mask") {
        r_.skip(p, std::string("masking ") + name->get<std::string>() +
                       " has no policy-file form that works without the secret at hand: run "
                       "with `--credential NAME=HOST[,HOST...]` (network.credentials)");
      } else {
        refuse(source_, join(p, "mode"), show(*mode) + " is not a mode (accepted: deny, mask)");
      }
      for (const auto& [k, x] : v[i].items()) {
        (void)x;
        if (k != name_key && k != "mode") {
          r_.skip(join(p, k), "no equivalent in cordon (extraction, injection hosts, decoding)");
        }
      }
    }
  }

  // srt's mandatory write protections hold beneath the workspace and every write grant.
  void mandatory_denies() {
    if (tls_terminate_) {
      // srt terminates TLS for every allowed host; cordon's network.inspect names them.
      const auto allow = r_.policy.contains("network")
                             ? r_.policy["network"].value("allow", nlohmann::ordered_json::array())
                             : nlohmann::ordered_json::array();
      for (const auto& a : allow) {
        std::string host = a.get<std::string>();
        size_t colon = host.find(':');
        if (colon != std::string::npos && host.find(':', colon + 1) == std::string::npos) {
          host.resize(colon);  // "name:443": inspect takes the name only
        }
        r_.add("network.inspect", host, "network.tlsTerminate");
        --r_.settings;  // the same setting, counted once
      }
    }
    std::vector<std::string> names(kMandatoryFiles.begin(), kMandatoryFiles.end());
    names.insert(names.end(), kMandatoryDirs.begin(), kMandatoryDirs.end());
    if (!allow_git_config_) {
      names.push_back(".git/config");
    }
    std::vector<std::string> roots = {""};
    roots.insert(roots.end(), write_roots_.begin(), write_roots_.end());
    for (const auto& root : roots) {
      for (const auto& n : names) {
        std::string base = root;
        while (base.size() > 1 && base.back() == '/') {
          base.pop_back();
        }
        std::string pattern = (base.empty() ? "" : base + "/") + "**/" + n;
        r_.add("filesystem.deny_write", pattern, "sandbox-runtime's mandatory deny paths");
        --r_.settings;  // srt's built-in list, not a setting of the file
      }
    }
  }

  std::string source_;
  ImportResult r_;
  std::vector<std::string> deny_read_;
  std::vector<std::string> write_roots_;
  bool allow_git_config_ = false;
  bool tls_terminate_ = false;
};

}  // namespace

bool is_srt_key(std::string_view section, std::string_view key) {
  static const std::vector<std::string_view> top = {"credentials",
                                                    "ignoreViolations",
                                                    "enableWeakerNestedSandbox",
                                                    "enableWeakerNetworkIsolation",
                                                    "allowAppleEvents",
                                                    "ripgrep",
                                                    "mandatoryDenySearchDepth",
                                                    "allowPty",
                                                    "seccomp",
                                                    "bwrapPath",
                                                    "socatPath",
                                                    "javaAgentJarPath",
                                                    "windows",
                                                    "git"};
  static const std::vector<std::string_view> network = {
      "allowedDomains",   "deniedDomains",       "deniedDomainReasons", "strictAllowlist",
      "allowUnixSockets", "allowAllUnixSockets", "allowLocalBinding",   "allowMachLookup",
      "httpProxyPort",    "socksProxyPort",      "mitmProxy",           "filterRequest",
      "tlsTerminate",     "parentProxy"};
  static const std::vector<std::string_view> filesystem = {
      "disabled", "denyRead", "allowRead", "allowWrite", "denyWrite", "allowGitConfig"};
  const auto& list = section.empty() ? top : section == "network" ? network : filesystem;
  return std::find(list.begin(), list.end(), key) != list.end();
}

ImportResult import_srt(std::string_view text, const std::string& source) {
  json root;
  // The callback sees each value's depth before it is built: a hostile file nested a million
  // deep is refused at depth kMaxInputDepth, not walked.
  auto cb = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxInputDepth) {
      throw std::length_error("too deep");
    }
    return true;
  };
  try {
    root = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true,
                       /*ignore_comments=*/true);
  } catch (const std::length_error&) {
    refuse(source, "",
           "nested deeper than " + std::to_string(kMaxInputDepth) +
               " levels; sandbox-runtime settings are a few levels deep (is this the right "
               "file?)");
  } catch (const json::exception& e) {
    std::string what = e.what();
    size_t at = what.find("line");
    refuse(source, "",
           "is not valid JSON: " + (at == std::string::npos ? what : what.substr(at)) +
               " (sandbox-runtime settings are a JSON object)");
  }
  return SrtReader(source).run(root);
}

}  // namespace cordon::policy::import
