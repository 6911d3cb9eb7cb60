// The decision functions of the policy model: network destinations, file access, environment.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/glob.h"
#include "policy/ip_ranges.h"
#include "policy/policy.h"

namespace cordon::policy {
namespace {

std::string indexed(const char* field, size_t i) {
  return std::string(field) + "[" + std::to_string(i) + "]";
}

// Whether an allow pattern names `ip` explicitly enough to reach a special address. A metadata
// address needs the exact address (a "169.254.0.0/16" for link-local services must not hand out
// cloud credentials); other special addresses need a pattern lying wholly in special space, so
// "10.0.0.0/8" or "127.0.0.1" reach them but "0.0.0.0/0" does not.
bool names_special(const HostPattern& p, const IpAddress& ip) {
  if (ip.is_metadata()) {
    int full = ip.v6 ? 128 : 32;
    return p.net.prefix == full && p.net.addr == ip;
  }
  return net_within_special(p.net);
}

// Relative deny-style patterns that start with "**" ("**/.env", "**/*.pem") name a file anywhere,
// so they also cover extra host paths granted by filesystem.read/write. Allow lists never widen
// this way.
template <typename Test>
bool deny_rule_test(const PathPattern& p, std::string_view path, Test test) {
  if (test(p, path)) {
    return true;
  }
  if (!p.absolute && !path.empty() && path.front() == '/' && p.expanded.rfind("**", 0) == 0) {
    return test(p, path.substr(1));
  }
  return false;
}

bool deny_matches(const PathPattern& p, std::string_view path) {
  return deny_rule_test(p, path,
                        [](const PathPattern& q, std::string_view s) { return q.matches(s); });
}

// deny_matches for a workspace path that is also known by its host path: an absolute rule may
// name it that way.
bool deny_matches_at(const PathPattern& p, std::string_view path, std::string_view host_path) {
  return deny_matches(p, path) || (!host_path.empty() && p.absolute && p.matches(host_path));
}

// `path` relative to `root` when it is `root` ("") or lies beneath it; nullopt otherwise.
std::optional<std::string_view> relative_to(std::string_view root, std::string_view path) {
  while (root.size() > 1 && root.back() == '/') {
    root.remove_suffix(1);
  }
  if (root.empty() || path.substr(0, root.size()) != root) {
    return std::nullopt;
  }
  if (path.size() == root.size()) {
    return std::string_view{};
  }
  if (path[root.size()] != '/') {
    return std::nullopt;
  }
  return path.substr(root.size() + 1);
}

// Whether protect pattern `p` covers the host path `path` (absolute, or "~/..." as typed in a
// query). A relative pattern ("**/.claude/**") is anchored at the root of what holds the path,
// as it is at the workspace root for workspace paths: each filesystem.write grant naming a host
// directory holding it. A grant of "~/.claude" shows it "settings.json", a grant of "~" shows it
// ".claude/settings.json": naming a protected directory itself in filesystem.write is the
// policy's decision to write it (presets keep its hooks and settings with deny_write), while
// what it holds at any depth (a nested .git/hooks, a project's .claude) stays protected. Any
// holding grant under which the pattern matches decides (fail closed when grants nest); a path
// no grant names a root for is matched from "/", like a deny rule.
bool protect_matches(const PathPattern& p, std::string_view path,
                     const std::vector<PathPattern>& write) {
  if (p.absolute) {
    return p.matches(path);
  }
  if (p.expanded.rfind("**", 0) != 0) {
    return false;  // only "**/..." patterns reach beyond the workspace (deny_rule_test)
  }
  bool held = false;
  for (const PathPattern& g : write) {
    if (!g.absolute || g.has_glob) {
      continue;
    }
    auto rel = relative_to(path.front() == '~' ? std::string_view(g.text) : g.expanded, path);
    if (!rel) {
      continue;
    }
    held = true;
    if (!rel->empty() && p.matches(*rel)) {
      return true;
    }
  }
  // "~/x" as typed: from the home directory, which "**/" reaches from "/" too.
  return !held &&
         p.matches(path.substr(path.front() == '~' ? std::min<size_t>(2, path.size()) : 1));
}

// The same reach for "may match beneath a directory" (FilesystemPolicy::rules_beneath).
bool deny_may_match_beneath(const PathPattern& p, std::string_view dir) {
  return deny_rule_test(
      p, dir, [](const PathPattern& q, std::string_view s) { return q.may_match_beneath(s); });
}

// "localhost" names the host's loopback service (HostPattern::names_host_loopback): the addresses
// the name stands for, as the sandbox dials them, are covered by the entry like the name itself.
bool localhost_covers(const HostPattern& p, const IpAddress& ip, uint16_t port) {
  static const IpAddress kV4 = IpAddress::from_v4(0x7f000001);
  static const IpAddress kV6 = *IpAddress::parse("::1");
  return p.kind == HostPattern::Kind::Exact && p.name == "localhost" && p.matches_port(port) &&
         (ip == kV4 || ip == kV6);
}

bool entry_matches_ip(const HostPattern& p, const IpAddress& ip, uint16_t port) {
  return p.matches_ip(ip, port) || localhost_covers(p, ip, port);
}

bool is_workspace_path(std::string_view path) {
  return path.empty() || (path.front() != '/' && path.front() != '~');
}

// '*'-only glob, ASCII case-insensitive, iterative with one backtrack point.
bool env_glob(std::string_view pat, std::string_view s) {
  return glob_match(pat, s, GlobOptions{.question = false, .case_insensitive = true});
}

// The deny entry that refuses the raw address `ip` on `port`, if any: the one deny loop for
// addresses, shared by raw-IP decisions and the check of resolved addresses.
std::optional<NetDecision> deny_for_ip(const NetworkPolicy& p, const IpAddress& ip, uint16_t port) {
  for (size_t i = 0; i < p.deny.size(); ++i) {
    // A deny "*" means "nothing at all", raw addresses included; other name patterns cannot
    // say anything about an address.
    bool any = p.deny[i].kind == HostPattern::Kind::AnyName && p.deny[i].matches_port(port);
    if (any || entry_matches_ip(p.deny[i], ip, port)) {
      return NetDecision{false, indexed("network.deny", i), &p.deny[i]};
    }
  }
  return std::nullopt;
}

NetDecision decide_address(const NetworkPolicy& p, const IpAddress& ip, uint16_t port) {
  if (auto d = deny_for_ip(p, ip, port)) {
    return *d;
  }
  const bool special = ip.is_special() || ip.is_metadata();
  bool matched_unnamed = false;
  for (size_t i = 0; i < p.allow.size(); ++i) {
    if (localhost_covers(p.allow[i], ip, port)) {
      return {true, indexed("network.allow", i), &p.allow[i]};
    }
    if (!p.allow[i].matches_ip(ip, port)) {
      continue;
    }
    if (special && !names_special(p.allow[i], ip)) {
      matched_unnamed = true;
      continue;
    }
    return {true, indexed("network.allow", i), &p.allow[i]};
  }
  if (special || matched_unnamed) {
    return {false, "network: private/loopback/metadata address not named by network.allow"};
  }
  return {false, "network.allow (no match)"};
}

}  // namespace

bool NetworkPolicy::inspects(std::string_view host, uint16_t port) const {
  auto named = [&](const std::vector<HostPattern>& pats) {
    return std::any_of(pats.begin(), pats.end(),
                       [&](const HostPattern& h) { return h.matches_name(host, port); });
  };
  if (named(inspect_exclude)) {
    return false;
  }
  return named(inspect) ||
         std::any_of(rules.begin(), rules.end(),
                     [&](const HttpRule& r) { return r.host.matches_name(host, port); }) ||
         std::any_of(credentials.begin(), credentials.end(),
                     [&](const Credential& c) { return c.bound_to(host, port); });
}

bool Credential::bound_to(std::string_view host, uint16_t port) const {
  return std::any_of(hosts.begin(), hosts.end(),
                     [&](const HostPattern& h) { return h.matches_name(host, port); });
}

Decision NetworkPolicy::decide_name(std::string_view host, uint16_t port) const {
  return decide_destination(host, port).decision();
}

Decision NetworkPolicy::decide_ip(const IpAddress& ip, uint16_t port) const {
  return decide_address(*this, ip, port).decision();
}

NetDecision NetworkPolicy::decide_destination(std::string_view host, uint16_t port) const {
  std::string n = normalize_host(host);
  if (n.empty()) {
    return {false, "network (not a valid host name)"};
  }
  if (auto ip = IpAddress::parse(n)) {
    return decide_address(*this, *ip, port);
  }
  for (size_t i = 0; i < deny.size(); ++i) {
    if (deny[i].matches_name(n, port)) {
      return {false, indexed("network.deny", i), &deny[i]};
    }
  }
  for (size_t i = 0; i < allow.size(); ++i) {
    if (allow[i].matches_name(n, port)) {
      return {true, indexed("network.allow", i), &allow[i]};
    }
  }
  return {false, "network.allow (no match)"};
}

NetDecision NetworkPolicy::decide_dns(std::string_view name) const {
  for (size_t i = 0; i < deny.size(); ++i) {
    const auto& d = deny[i];
    if (!d.is_ip() && d.port_lo <= 1 && d.port_hi == 65535 && d.matches_name(name, 1)) {
      return {false, indexed("network.deny", i), &d};
    }
  }
  for (size_t i = 0; i < allow.size(); ++i) {
    const auto& a = allow[i];
    if (!a.is_ip() && a.matches_name(name, a.port_lo == 0 ? 1 : a.port_lo)) {
      return {true, indexed("network.allow", i), &a};
    }
  }
  return {false, "network.allow (no match)"};
}

NetDecision NetworkPolicy::check_resolved(std::string_view name, const IpAddress& ip, uint16_t port,
                                          bool pinned, const NetDecision& by_name) const {
  if (auto d = deny_for_ip(*this, ip, port)) {
    return *d;
  }
  if (ip.is_metadata()) {
    // A pin to a metadata address is the SSRF this check exists for: pinned or not, only an
    // allow entry naming the address reaches it.
    auto d = decide_address(*this, ip, port);
    if (!d.allow) {
      d.rule = "network (metadata address " + ip.to_string() + " not named in network.allow)";
    }
    return d;
  }
  if (pinned) {
    // The policy's author typed this address: allowed even in a special range.
    return {true, "network.resolve." + std::string(name)};
  }
  if (ip.is_special()) {
    auto d = decide_address(*this, ip, port);
    if (!d.allow) {
      d.rule = "network (special address " + ip.to_string() + " not named in network.allow)";
    }
    return d;
  }
  return by_name;
}

const std::vector<IpAddress>* NetworkPolicy::pins(std::string_view name) const {
  auto it = resolve.find(std::string(name));
  return it == resolve.end() ? nullptr : &it->second;
}

Decision FilesystemPolicy::decide_read(std::string_view path, std::string_view host_path) const {
  for (size_t i = 0; i < deny.size(); ++i) {
    if (deny_matches_at(deny[i], path, host_path)) {
      return {false, indexed("filesystem.deny", i)};
    }
  }
  if (is_workspace_path(path)) {
    return {true, "filesystem.workspace"};
  }
  for (size_t i = 0; i < read.size(); ++i) {
    if (read[i].matches(path)) {
      return {true, indexed("filesystem.read", i)};
    }
  }
  for (size_t i = 0; i < write.size(); ++i) {
    if (write[i].matches(path)) {
      return {true, indexed("filesystem.write", i)};
    }
  }
  return {false, "filesystem.read (no match)"};
}

Decision FilesystemPolicy::decide_write(std::string_view path, std::string_view host_path) const {
  for (size_t i = 0; i < deny.size(); ++i) {
    if (deny_matches_at(deny[i], path, host_path)) {
      return {false, indexed("filesystem.deny", i)};
    }
  }
  for (size_t i = 0; i < deny_write.size(); ++i) {
    if (deny_matches_at(deny_write[i], path, host_path)) {
      return {false, indexed("filesystem.deny_write", i)};
    }
  }
  for (size_t i = 0; i < protect.size(); ++i) {
    const PathPattern& r = protect[i];
    bool hit = is_workspace_path(path) ? deny_matches_at(r, path, host_path)
                                       : protect_matches(r, path, write);
    if (hit) {
      return {false, indexed("filesystem.protect", i)};
    }
  }
  if (is_workspace_path(path)) {
    switch (mode) {
      case WorkspaceMode::Ro:
        return {false, "filesystem.mode (ro)"};
      case WorkspaceMode::Cow:
        return {true, "filesystem.mode (cow)"};
      case WorkspaceMode::Rw:
        return {true, "filesystem.mode (rw)"};
    }
  }
  for (size_t i = 0; i < write.size(); ++i) {
    if (write[i].matches(path)) {
      return {true, indexed("filesystem.write", i)};
    }
  }
  return {false, "filesystem.write (no match)"};
}

std::vector<FilesystemPolicy::RuleRef> FilesystemPolicy::rules_beneath(std::string_view dir,
                                                                       bool workspace) const {
  std::vector<RuleRef> out;
  for (const auto& [field, rules] :
       {std::pair{"filesystem.deny", &deny}, std::pair{"filesystem.deny_write", &deny_write},
        std::pair{"filesystem.protect", &protect}}) {
    for (size_t i = 0; i < rules->size(); ++i) {
      const PathPattern& r = (*rules)[i];
      // A relative rule is anchored at the workspace root: beneath it by definition.
      if ((workspace && !r.absolute) || deny_may_match_beneath(r, dir)) {
        out.push_back({indexed(field, i), r.text});
      }
    }
  }
  return out;
}

std::optional<size_t> FilesystemPolicy::protect_rule(std::string_view path, bool is_dir) const {
  for (size_t i = 0; i < protect.size(); ++i) {
    if (deny_matches(protect[i], path) || (!is_dir && protect[i].names_beneath(path))) {
      return i;
    }
  }
  return std::nullopt;
}

Decision FilesystemPolicy::decide_create(std::string_view path, bool is_dir,
                                         std::string_view host_path) const {
  Decision d = decide_write(path, host_path);
  if (d.allow && !is_dir && is_workspace_path(path)) {
    if (auto i = protect_rule(path, false)) {
      return {false, indexed("filesystem.protect", *i)};
    }
  }
  return d;
}

bool EnvPolicy::is_denied(std::string_view name) const { return denied_by(name).has_value(); }

std::optional<size_t> EnvPolicy::denied_by(std::string_view name) const {
  for (size_t i = 0; i < deny.size(); ++i) {
    if (env_glob(deny[i], name)) {
      return i;
    }
  }
  return std::nullopt;
}

bool EnvPolicy::is_secret(std::string_view name) const {
  for (const auto& n : pass) {
    if (n == name) {
      return true;
    }
  }
  return is_denied(name);
}

}  // namespace cordon::policy
