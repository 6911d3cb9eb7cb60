// The policy model: an immutable, validated description of what a sandboxed program may do.
// Parsing and validation live in loader.h; matching in host_pattern.h / path_pattern.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/host_pattern.h"
#include "policy/http_rules.h"
#include "policy/path_pattern.h"

namespace cordon::policy {

using Millis = std::chrono::milliseconds;

// A decision and the policy path that made it, e.g. {false, "network.deny[0]"} or
// {false, "network.allow (no match)"}; events carry `rule` verbatim.
struct Decision {
  bool allow = false;
  std::string rule;
  bool operator==(const Decision&) const = default;
};

// A network decision with the entry that made it, for callers that need the rule itself (its
// ports), not only its path. `pattern` points into the NetworkPolicy that decided (null when no
// allow/deny entry did: no match, a pin, a special-address refusal); `decision()` is the plain
// form.
struct NetDecision {
  bool allow = false;
  std::string rule;                      // as Decision::rule, e.g. "network.allow[2]"
  const HostPattern* pattern = nullptr;  // network.allow[i] / network.deny[i] that decided
  Decision decision() const { return {allow, rule}; }
};

// network.credentials[i]: a secret in cordon's environment that the sandbox sees only as a
// placeholder; the proxy puts the real value back in requests to `hosts` and refuses the
// placeholder anywhere else.
struct Credential {
  std::string env;                 // the variable's name (its value is never in the policy)
  std::vector<HostPattern> hosts;  // exact names, each allowed by network.allow; inspected
  std::string header;              // "Name: text with {}" set on requests to `hosts`, or ""
  // The value also goes into plain-HTTP requests to `hosts` (network.credentials[i].plain_http);
  // by default only inspected HTTPS gets it, plain HTTP the placeholder as sent.
  bool plain_http = false;
  bool bound_to(std::string_view host, uint16_t port) const;
  bool operator==(const Credential&) const = default;
};

struct NetworkPolicy {
  std::vector<HostPattern> allow;          // network.allow
  std::vector<HostPattern> deny;           // network.deny; wins over allow
  uint32_t max_connections = 64;           // concurrent, whole session; 0 = no connections at all
  uint32_t max_connections_per_host = 16;  // concurrent, per destination name (or IP)
  uint32_t connections_per_minute = 600;   // new connections, sliding minute
  uint64_t max_bytes_out = 0;              // 0 = unlimited (the exfiltration budget)
  uint64_t max_bytes_in = 0;               // 0 = unlimited
  Millis idle_timeout{std::chrono::minutes(5)};
  Millis connect_timeout{std::chrono::seconds(10)};
  // network.resolve: names pinned to addresses (like curl --resolve). Keys lowercased, no trailing
  // dot.
  std::map<std::string, std::vector<IpAddress>> resolve;
  // network.dns.types: record types answered for allowed names; default {"A","AAAA"}.
  // Anything else (TXT, ANY, NULL, ...) is refused unless listed here.
  std::vector<std::string> dns_types{"A", "AAAA"};
  // network.proxy_env: announce HTTP_PROXY/HTTPS_PROXY/ALL_PROXY/NO_PROXY inside the sandbox.
  bool proxy_env = true;
  // network.rules: which methods and paths HTTP requests to a host may use (plain HTTP); first
  // match wins, and a host some rule names is denied what no rule allows.
  std::vector<HttpRule> rules;
  // network.inspect: hosts whose TLS the proxy terminates with a leaf from the session's CA, so
  // that network.rules and the request log see HTTPS requests. The hosts network.rules name are
  // always inspected too (rules a tunnel would bypass); network.inspect_exclude wins over both
  // (certificate pinning, mTLS).
  std::vector<HostPattern> inspect;
  std::vector<HostPattern> inspect_exclude;
  // network.ca: a user-supplied CA (PEM files, absolute or "~/"); empty = a CA made per session.
  std::string ca_cert, ca_key;
  // network.credentials; their hosts are inspected (unless network.inspect_exclude names them).
  std::vector<Credential> credentials;
  // network.on_exfil: what a credential's placeholder or a canary seen toward a host it is not
  // bound to does besides the 403 and the net.exfil event: "refuse" (nothing more) or "kill"
  // (the session ends, exit status 123).
  bool kill_on_exfil = false;
  // Whether TLS to `host` (a name or IP literal as the client named it) on `port` is inspected.
  bool inspects(std::string_view host, uint16_t port) const;
  // Whether any host is inspected (and so a CA is needed).
  bool inspects_any() const { return !inspect.empty() || !rules.empty() || !credentials.empty(); }

  // Decides a destination given by name (what DNS, SNI, Host, CONNECT or SOCKS named).
  // Deny wins; then the first matching allow; otherwise {false, "network.allow (no match)"}.
  Decision decide_name(std::string_view host, uint16_t port) const;
  // Decides a raw address with no name behind it: only IP/CIDR patterns can allow it, and private,
  // loopback, link-local, metadata, multicast addresses need a pattern that names them explicitly.
  Decision decide_ip(const IpAddress& ip, uint16_t port) const;

  // The forms the egress proxy uses (one decision path for DNS, CONNECT, SOCKS5, HTTP and
  // transparent connections), each naming the entry that decided:
  //
  // A destination as the sandbox named it: a name (decide_name) or an IP literal (decide_ip).
  NetDecision decide_destination(std::string_view host, uint16_t port) const;
  // A DNS query, where the port is not known yet: is the name allowed on some port? A deny
  // entry counts only if it covers every port; the allowing entry's ports say which port the
  // answer's addresses are checked for.
  NetDecision decide_dns(std::string_view name) const;
  // One address `name` resolved to, before it is handed out or dialled. `pinned`: it comes from
  // network.resolve for this name. An IP/CIDR deny entry wins; a metadata address needs an allow
  // entry naming it even when pinned; a pinned address is otherwise allowed (rule
  // "network.resolve.NAME"); other special addresses need an IP/CIDR allow entry; anything else
  // keeps the name's decision `by_name`.
  NetDecision check_resolved(std::string_view name, const IpAddress& ip, uint16_t port, bool pinned,
                             const NetDecision& by_name) const;
  // network.resolve's pins for `name` (already normalised), or null.
  const std::vector<IpAddress>* pins(std::string_view name) const;
  bool operator==(const NetworkPolicy&) const = default;
};

enum class WorkspaceMode { Cow, Ro, Rw };
enum class DenyStyle { Eacces, Hide };  // how a read-denied path inside the workspace looks

struct QuotaPolicy {
  uint64_t bytes = 1ull << 30;  // upper-layer bytes; 0 = unlimited
  uint64_t inodes = 100000;     // upper-layer inodes; 0 = unlimited
  bool operator==(const QuotaPolicy&) const = default;
};

struct FilesystemPolicy {
  std::string workspace = ".";  // as written; launcher resolves relative to cwd (~ expanded)
  WorkspaceMode mode = WorkspaceMode::Cow;
  std::vector<PathPattern> read;        // extra host paths visible read-only
  std::vector<PathPattern> write;       // extra host paths visible read-write
  std::vector<PathPattern> deny;        // neither readable nor writable; wins over everything
  std::vector<PathPattern> deny_write;  // readable, never writable
  // Paths that would run code on the host later (.git/hooks/**, .envrc, ...): write-protected and
  // flagged in diff/commit. Defaults to default_protected(); set [] in the file to lift it.
  std::vector<PathPattern> protect;
  DenyStyle deny_style = DenyStyle::Eacces;
  QuotaPolicy quota;
  uint64_t tmp = 64ull << 20;  // size of the sandbox's /tmp tmpfs
  // filesystem.xattrs: whether the copy-on-write workspace keeps extended attributes. Off, the
  // cow view answers the xattr operations ENOSYS, which makes the kernel stop asking for the
  // mount: no xattr can be set there (EOPNOTSUPP), none is seen (a lower file's own are
  // hidden), and commit writes none. ro/rw views keep xattrs either way.
  bool xattrs = false;

  // For a path relative to the workspace root ("src/a.c") or absolute on the host.
  // Deny wins; read is allowed otherwise (the workspace is readable by definition).
  // `host_path`: for a workspace-relative `path`, where it is on the host, so that absolute
  // rules reaching into the workspace ("~/proj/secrets") decide it too.
  Decision decide_read(std::string_view path, std::string_view host_path = {}) const;
  // deny, deny_write, protect, then mode (workspace) or filesystem.write (host paths).
  Decision decide_write(std::string_view path, std::string_view host_path = {}) const;
  // A deny-style rule (deny, deny_write, protect) by its policy path.
  struct RuleRef {
    std::string rule;  // "filesystem.protect[3]"
    std::string text;  // as written, "~/.claude/hooks/**"
  };
  // The deny-style rules that may decide a path beneath the host directory `dir` (absolute),
  // existing or created later. `workspace`: `dir` is the workspace, where relative rules apply.
  // Empty when a plain mount of `dir` already says everything the rules say beneath it.
  std::vector<RuleRef> rules_beneath(std::string_view dir, bool workspace) const;
  // The protect entry covering an entry at workspace-relative `path`, if any: the path matches
  // one, or the entry is not a directory and stands at a name a pattern continues beneath (a
  // `.git` file or symlink, a `.github` symlink: what git or CI would read through it).
  std::optional<size_t> protect_rule(std::string_view path, bool is_dir) const;
  // decide_write for creating an entry (create, mkdir, symlink, link, rename target): adds the
  // non-directory case of protect_rule.
  Decision decide_create(std::string_view path, bool is_dir, std::string_view host_path = {}) const;
  bool operator==(const FilesystemPolicy&) const = default;
};

struct EnvPolicy {
  std::vector<std::string> keep{"PATH", "HOME", "LANG",    "LC_ALL", "LC_CTYPE",  "TERM",
                                "TZ",   "USER", "LOGNAME", "SHELL",  "COLORTERM", "NO_COLOR"};
  std::map<std::string, std::string> set;
  // Glob patterns (only '*') matched against names, case-insensitively; wins over keep (not over
  // set).
  std::vector<std::string> deny{"*TOKEN*",
                                "*SECRET*",
                                "*PASSWORD*",
                                "*PASSWD*",
                                "*API_KEY*",
                                "*APIKEY*",
                                "*CREDENTIAL*",
                                "*PRIVATE_KEY*",
                                "AWS_*",
                                "AZURE_*",
                                "GOOGLE_APPLICATION_CREDENTIALS",
                                "GH_*",
                                "GITHUB_*",
                                "SSH_AUTH_SOCK",
                                "GPG_AGENT_INFO",
                                "*_AUTH*",
                                "*COOKIE*"};
  // Names passed from the host even when `deny` matches them (process.env.pass, --env-pass): the
  // explicit way to hand the program a credential. Their values are never recorded.
  std::vector<std::string> pass;
  bool is_denied(std::string_view name) const;
  // The index in `deny` of the first pattern matching `name`, if any.
  std::optional<size_t> denied_by(std::string_view name) const;
  // Whether a value of `name` counts as a secret that cordon keeps out of its record (policy.json,
  // events, summaries): a name `deny` matches, or one listed in `pass`.
  bool is_secret(std::string_view name) const;
  bool operator==(const EnvPolicy&) const = default;
};

struct SeccompPolicy {
  // Syscall names added to / removed from the default deny list (process.seccomp.deny / .allow).
  std::vector<std::string> deny;
  std::vector<std::string> allow;
  // The first entry the lists may not hold, whatever the kernel knows, as {field path, why}: the
  // user-namespace filters (unshare, clone, clone3) are lifted by process.nested_sandbox only, and
  // what every launch needs (execve, exit, ...) cannot be denied. The loader refuses such a policy
  // and the filter compiler checks again: one rule, two gates.
  std::optional<std::pair<std::string, std::string>> invalid_entry() const;
  bool operator==(const SeccompPolicy&) const = default;
};

struct ProcessPolicy {
  uint64_t memory = 1ull << 30;  // bytes; 0 = unlimited
  double cpus = 1.0;             // CPU quota in cores; 0 = unlimited
  uint32_t pids = 512;           // tasks; 0 = unlimited
  uint32_t nofile = 1024;
  uint64_t fsize = 0;  // largest file the program may write, bytes; 0 = unlimited
  Millis timeout{std::chrono::minutes(30)};    // wall clock; 0 = none
  Millis kill_grace{std::chrono::seconds(5)};  // SIGTERM -> SIGKILL
  EnvPolicy env;
  std::vector<PathPattern> exec_allow;  // empty = any
  SeccompPolicy seccomp;
  // process.nested_sandbox: the program may create user and mount namespaces (and mount in them),
  // so its own sandbox (bubblewrap) works inside cordon as a second layer. Off by default: a
  // new user namespace hands the program a full capability set over the namespaces it creates,
  // the kernel attack surface most container escapes start from.
  bool nested_sandbox = false;
  std::string hostname = "cordon";
  bool operator==(const ProcessPolicy&) const = default;
};

// The session's own record, events.jsonl: bounded so that no program can fill the host's disk
// through it (docs/events.md).
struct RecordPolicy {
  // The file's cap. The last part (record_reserve()) is kept for the end of the session: once the
  // rest is full, normal events are dropped (counted) after one limit.hit.
  uint64_t max_bytes = 256ull << 20;
  // Per writer (launcher, netproxy, fusefs, shim) and kind family (net, fs, proc, ...): sustained
  // events per second, with a burst of ten seconds' worth; 0 = no rate limit.
  uint32_t events_per_second = 1000;
  // A second copy of the record, line for line: "stderr", a file descriptor number or a path;
  // "" = none. Written off the sandbox's path, with drops counted (launcher/sidecars/event_sink.h).
  std::string events_to;
  // An OTLP/HTTP collector the launcher sends the record to as logs (JSON), off the sandbox's
  // path, with drops counted; "" = none. The sandbox is not given a way to it
  // (launcher/sidecars/otlp_exporter.h).
  std::string otlp;
  bool operator==(const RecordPolicy&) const = default;
};
inline constexpr uint64_t kMinRecordBytes = 1ull << 20;

// The decoys `canaries` can name: "aws" (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY and
// ~/.aws/credentials), "ssh" (~/.ssh/id_ed25519), "dotenv" (~/.env), "github" (GITHUB_TOKEN).
inline constexpr std::string_view kCanaryNames[] = {"aws", "ssh", "dotenv", "github"};
// All of them: the default.
inline std::vector<std::string> default_canaries() {
  return {std::begin(kCanaryNames), std::end(kCanaryNames)};
}

struct Policy {
  int version = 1;
  // The agent preset the policy extends ("extends", `cordon run --agent`), already applied to
  // the sections below (policy/presets.h); "" for none.
  std::string extends;
  NetworkPolicy network;
  FilesystemPolicy filesystem;
  ProcessPolicy process;
  RecordPolicy record;
  // canaries: the decoy secrets planted in the sandbox's view (launcher/canaries.h), by name
  // (kCanaryNames); empty = none ("canaries": false).
  std::vector<std::string> canaries = default_canaries();
  bool operator==(const Policy&) const = default;
};

// The sensitive-paths default of filesystem.protect.
std::vector<PathPattern> default_protected();
// The secrets default of filesystem.deny (~/.ssh, **/.env, **/*.pem, ...), "~" expanded to `home`.
// A policy file that does not mention filesystem.deny keeps it.
std::vector<PathPattern> default_denied(std::string_view home);

}  // namespace cordon::policy
