// Policy suggestions from a session's record: refusals grouped into the smallest allow entries.
#include "launcher/session/policy_suggest.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "launcher/sandbox/landlock.h"
#include "launcher/session/net_summary.h"
#include "launcher/session/session_store.h"
#include "launcher/session/session_text.h"
#include "policy/loader.h"
#include "policy/metadata_names.h"

namespace cordon::launcher::suggest {
namespace {

constexpr size_t kMaxScanBytes = 16u << 20;  // as `cordon log --net`
constexpr size_t kField = 160;               // characters of a hostile string shown
// This many refused names under one parent domain earn a note about the wildcard.
constexpr size_t kSubdomainHint = 3;

std::string str(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) {
    return {};
  }
  if (it->is_string()) {
    return it->get<std::string>();
  }
  if (it->is_number_integer()) {
    return std::to_string(it->get<int64_t>());
  }
  return {};
}

int64_t num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

// "curl (pid 4): curl -sS http://x/" from an event's (or attribution's) pid, exe and argv.
std::string process_of(const nlohmann::json& ev) {
  std::string exe = str(ev, "exe");
  if (exe.empty()) {
    return {};
  }
  std::string s = exe.substr(exe.rfind('/') + 1);
  if (int64_t pid = num(ev, "pid"); pid > 0) {
    s += " (pid " + std::to_string(pid) + ")";
  }
  if (auto a = ev.find("argv"); a != ev.end() && a->is_array()) {
    std::string args;
    for (const auto& x : *a) {
      if (x.is_string()) {
        args += (args.empty() ? "" : " ") + x.get<std::string>();
      }
    }
    if (!args.empty()) {
      s += ": " + args;
    }
  }
  return text::one_line(s, kField);
}

void count(Evidence& e, const nlohmann::json& ev, std::string process, std::string example) {
  if (e.count++ == 0) {
    e.first_time = str(ev, "ts");
    e.first_process = std::move(process);
    e.example = text::one_line(example, kField);
  }
}

std::string with_port(const std::string& host, int64_t port) {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return port > 0 ? h + ":" + std::to_string(port) : h;
}

bool beneath(const std::string& path, const std::string& dir) {
  if (dir == "/") {
    return true;
  }
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

std::string parent_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

// Directories cordon composes for every sandbox (the system's, read-only, and its own /proc and
// /dev): a failed open there is the sandbox's shape, not a grant the program lacked. (/tmp is the
// sandbox's own too, but a host path under it can be granted and then appears over it.)
bool composed_by_cordon(const std::string& path) {
  static const char* const kDirs[] = {"/proc", "/sys",   "/dev",   "/usr",    "/bin", "/sbin",
                                      "/lib",  "/lib32", "/lib64", "/libx32", "/etc"};
  return std::any_of(std::begin(kDirs), std::end(kDirs),
                     [&](const char* d) { return beneath(path, d); });
}

// A path that names exactly one file: absolute, no glob characters (a policy entry would read
// them as a pattern), no "." or ".." segments. The record's paths come from the sandbox, so an
// entry is only ever made of one of these.
bool plain_path(const std::string& p) {
  if (p.empty() || p[0] != '/' || p.find_first_of("*?[]{}") != std::string::npos) {
    return false;
  }
  std::string with_slash = p + "/";
  return with_slash.find("/./") == std::string::npos &&
         with_slash.find("/../") == std::string::npos;
}

// One refused network destination, keyed by "name:port"; in a --learn session, also one that
// was used but that the policy the user asked for would have refused.
struct NetRefusal {
  std::string name;
  int64_t port = 0;
  std::string rule, reason, first_client;
  bool from_dns = false;  // only a refused lookup: the port comes from the shim's getaddrinfo
  bool used = false;      // allowed by --learn's widening: `rule` is the asked policy's answer
  Evidence ev;
};

struct FsAttempt {
  std::string path;
  bool write = false;
  std::string rule;  // fs.refused's rule, "" for a failed open the shim saw
  Evidence ev;
};

// Everything the suggestions are built from, gathered in one pass over the record.
struct Gathered {
  std::map<std::string, NetRefusal> net;  // by "name:port" (or "name" for a bare lookup)
  std::map<std::string, std::set<int64_t>> lookup_ports;  // name -> ports getaddrinfo was given
  std::map<std::string, std::string> lookup_process;      // name -> the first process to look up
  std::map<std::string, std::string> by_client;           // proxy client -> process
  std::vector<HeldBack> exfil;
  std::set<size_t> allow_used;          // network.allow indices that allowed something
  std::map<std::string, FsAttempt> fs;  // by "r:path" / "w:path"
  std::set<std::string> canary_paths;
  std::map<std::string, std::string> fs_refused_by;  // cordon-fs refusal's path -> process
  std::map<std::string, Evidence> execs;             // exec targets
  std::set<std::string> opened;                      // paths opened successfully (all-opens mode)
  bool all_opens = false;                            // the shim recorded successful opens too
  std::string workspace;
};

void on_net_refused(Gathered& g, const nlohmann::json& ev) {
  if (!str(ev, "proto").empty() && str(ev, "proto") != "tcp") {
    return;  // a packet netfilter dropped (UDP, ICMP): no allow entry carries it
  }
  std::string name = host_of(ev);
  int64_t port = num(ev, "port");
  auto& r = g.net[with_port(name, port)];
  if (r.ev.count == 0) {
    r.name = name;
    r.port = port;
    r.rule = str(ev, "rule");
    r.reason = str(ev, "reason");
    r.first_client = str(ev, "client");
  }
  std::string url = str(ev, "url");
  count(r.ev, ev, "",
        url.empty() ? "connection to " + with_port(name, port) : str(ev, "method") + " " + url);
}

// A getaddrinfo service as a TCP port: "8443", or a name from the host's services database
// ("https"); 0 when it is neither.
int64_t service_port(const std::string& service) {
  if (service.empty() || service.size() > 32) {
    return 0;
  }
  if (std::all_of(service.begin(), service.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    int64_t port = service.size() <= 5 ? std::stoll(service) : 0;
    return port <= 65535 ? port : 0;
  }
  servent se{};
  servent* found = nullptr;
  char buf[1024];
  if (::getservbyname_r(service.c_str(), "tcp", &se, buf, sizeof buf, &found) != 0 ||
      found == nullptr) {
    return 0;
  }
  return ntohs(static_cast<uint16_t>(found->s_port));
}

void on_dns(Gathered& g, const nlohmann::json& ev) {
  std::string name = str(ev, "name");
  if (name.empty()) {
    return;
  }
  if (str(ev, "source") == "shim") {
    // getaddrinfo's service argument: the port the program meant to reach.
    if (int64_t port = service_port(str(ev, "service")); port > 0) {
      g.lookup_ports[name].insert(port);
    }
    g.lookup_process.emplace(name, process_of(ev));
    return;
  }
  if (str(ev, "decision") == "deny") {
    auto& r = g.net[name];
    if (r.ev.count == 0) {
      r.name = name;
      r.rule = str(ev, "rule");
      r.reason = str(ev, "rcode");
      r.from_dns = true;
    }
    count(r.ev, ev, "", "DNS " + str(ev, "type") + " " + name + " answered " + str(ev, "rcode"));
  }
}

void on_allowed(Gathered& g, const nlohmann::json& ev) {
  const std::string rule = str(ev, "rule");
  constexpr std::string_view kAllow = "network.allow[";
  if (rule.compare(0, kAllow.size(), kAllow) == 0) {
    g.allow_used.insert(std::strtoul(rule.c_str() + kAllow.size(), nullptr, 10));
  }
}

// --learn: an allowed request (net.http), connection that carried no HTTP request (net.connect
// of a TLS or opaque stream) or DNS answer that the asked policy would have refused. It joins
// the refusals under the same key, with the asked policy's rule, so that one path turns both
// into entries. A connection cut for exfiltration is no use: net.exfil holds it back.
void on_used(Gathered& g, const nlohmann::json& ev, const std::string& kind,
             const policy::Policy& asked) {
  if (kind == "net.connect" && (str(ev, "mode") == "http" || str(ev, "end") == "exfil")) {
    return;  // its requests are counted one by one (net.http)
  }
  const std::string name = kind == "net.dns" ? str(ev, "name") : host_of(ev);
  const int64_t port = kind == "net.dns" ? 0 : num(ev, "port");
  if (name.empty() || port < 0 || port > 65535) {
    return;
  }
  const policy::NetDecision d =
      kind == "net.dns" ? asked.network.decide_dns(name)
                        : asked.network.decide_destination(name, static_cast<uint16_t>(port));
  if (d.allow) {
    return;
  }
  auto& r = g.net[kind == "net.dns" ? name : with_port(name, port)];
  if (r.ev.count == 0) {
    r.name = name;
    r.port = port;
    r.rule = d.rule;
    r.used = true;
    r.from_dns = kind == "net.dns";
    r.first_client = str(ev, "client");
  }
  std::string example = kind == "net.http"  ? str(ev, "method") + " " + str(ev, "url")
                        : kind == "net.dns" ? "DNS " + str(ev, "type") + " " + name
                                            : "connection to " + with_port(name, port);
  count(r.ev, ev, "", example);
}

void on_fs(Gathered& g, const nlohmann::json& ev, const std::string& kind) {
  std::string path = str(ev, "host_path");
  if (path.empty()) {
    path = str(ev, "path");
  }
  if (kind == "fs.canary") {
    g.canary_paths.insert(path);
    return;
  }
  int64_t err = num(ev, "errno");
  int64_t flags = num(ev, "flags");
  bool write = str(ev, "op") == "write" || str(ev, "op") == "create" ||
               (flags > 0 && (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0);
  if (kind == "fs.open") {
    if (err <= 0) {
      g.all_opens = true;
      g.opened.insert(path);
      return;
    }
    // Only the failures a grant can answer: not there (no mount), not permitted, read-only.
    if (err != ENOENT && err != EACCES && err != EPERM && err != EROFS) {
      return;
    }
  }
  auto& a = g.fs[(write ? "w:" : "r:") + path];
  if (a.ev.count == 0) {
    a.path = path;
    a.write = write;
    a.rule = kind == "fs.refused" ? str(ev, "rule") : "";
  }
  count(a.ev, ev, process_of(ev),
        std::string(write ? "write" : "read") + " of " + path + " failed: " +
            (str(ev, "error").empty() ? "errno " + std::to_string(err) : str(ev, "error")));
}

void gather_one(Gathered& g, const nlohmann::json& ev, const Inputs& in) {
  const std::string kind = str(ev, "kind"), source = str(ev, "source");
  if (kind == "session.start") {
    g.workspace = str(ev, "workspace");
  } else if (kind == "net.attribution") {
    if (!str(ev, "client").empty() && !str(ev, "exe").empty()) {
      g.by_client.emplace(str(ev, "client"), process_of(ev));
    }
  } else if (kind == "net.refused" && source == "netproxy") {
    on_net_refused(g, ev);
  } else if (kind == "net.exfil") {
    std::string what = with_port(host_of(ev), num(ev, "port"));
    std::string secret = str(ev, "canary").empty() ? "the placeholder of " + str(ev, "credential")
                                                   : "the " + str(ev, "canary") + " canary";
    HeldBack h{what, "carried " + secret + ": exfiltration is never turned into an allow", {}};
    count(h.evidence, ev, "", str(ev, "method") + " " + str(ev, "url"));
    g.exfil.push_back(std::move(h));
  } else if (kind == "net.dns") {
    on_dns(g, ev);
    if (source == "netproxy" && str(ev, "decision") != "deny") {
      on_allowed(g, ev);
      if (in.learn) {
        on_used(g, ev, kind, *in.policy);
      }
    }
  } else if ((kind == "net.connect" || kind == "net.http") && source == "netproxy") {
    on_allowed(g, ev);
    if (in.learn) {
      on_used(g, ev, kind, *in.policy);
    }
  } else if (kind == "fs.attribution") {
    // cordon-fs knows the caller's host pid only; the join names the sandbox process.
    if (!str(ev, "exe").empty()) {
      g.fs_refused_by.emplace(str(ev, "path"), process_of(ev));
    }
  } else if (kind == "fs.refused" || kind == "fs.open" || kind == "fs.canary") {
    on_fs(g, ev, kind);
  } else if (kind == "proc.exec") {
    std::string path = str(ev, "path");
    if (!path.empty() && path[0] == '/') {
      count(g.execs[path], ev, process_of(ev), "exec " + path);
    }
  }
}

Gathered gather(int events_fd, const Inputs& in, bool* truncated) {
  Gathered g;
  auto r = store::for_each_line(events_fd, kMaxScanBytes,
                                [&](size_t, std::string_view line, bool complete) {
                                  if (!complete) {
                                    return;
                                  }
                                  nlohmann::json ev = store::parse_event(line);
                                  if (ev.is_object()) {
                                    gather_one(g, ev, in);
                                  }
                                });
  *truncated = r.ok() && *r;
  return g;
}

// ---- network ----

bool is_ip_literal(const std::string& name) { return policy::IpAddress::parse(name).has_value(); }

// Why a refused destination gets no allow entry, or "" when it should get one.
std::string net_hold_reason(const NetRefusal& r) {
  // The name comes from the program (a Host header, an SNI): only a plain name or address
  // becomes an entry, never a pattern such as "*" or a CIDR.
  std::string why;
  auto pattern = policy::HostPattern::parse(with_port(r.name, r.port), &why);
  if (!pattern || (pattern->kind != policy::HostPattern::Kind::Exact &&
                   pattern->kind != policy::HostPattern::Kind::Ip)) {
    return "not a plain host name or address" + (why.empty() ? "" : " (" + why + ")") +
           "; not suggested";
  }
  if (policy::is_metadata_name(r.name)) {
    return "a cloud metadata service's name; not suggested: on a cloud instance it leads to the "
           "metadata address, which the built-in protection refuses and suggest never allows";
  }
  if (pattern->names_host_loopback()) {
    return "names the host's loopback; not suggested: an entry would carry the sandbox's "
           "connections to a service of the host (add \"localhost:PORT\" by hand if the program "
           "should reach one)";
  }
  if (auto ip = policy::IpAddress::parse(r.name); ip && (ip->is_special() || ip->is_metadata())) {
    return std::string("refused by the built-in protection; not suggested: ") +
           (ip->is_metadata() ? "a cloud metadata address"
                              : "a private, loopback or link-local "
                                "address") +
           " is only reachable when the policy names it, and suggest never does";
  }
  if (r.rule.rfind("network:", 0) == 0 || r.rule.rfind("network (", 0) == 0) {
    if (r.rule.find("name mismatch") != std::string::npos) {
      return "refused because the name and the address did not agree (" + r.rule +
             "); an allow entry would not change that";
    }
    return "refused by the built-in protection (" + r.rule + "); not suggested";
  }
  if (r.rule.rfind("network.deny", 0) == 0) {
    return "denied by " + r.rule + " in the policy; deny wins over allow, so no allow is suggested";
  }
  if (r.rule != "network.allow (no match)") {
    return "refused under " + (r.rule.empty() ? std::string("the proxy's rules") : r.rule) + " (" +
           text::one_line(r.reason, 120) + "), not for want of an allow entry";
  }
  return {};
}

// The parent domain a wildcard would name ("a.b.example.com" -> "b.example.com"), or "".
std::string parent_domain(const std::string& name) {
  size_t dot = name.find('.');
  if (dot == std::string::npos || is_ip_literal(name)) {
    return {};
  }
  std::string parent = name.substr(dot + 1);
  return parent.find('.') == std::string::npos ? "" : parent;
}

// The entries one refused destination calls for (none when `hold` is set).
std::vector<Suggestion> net_entries(Gathered& g, const std::string& key, const NetRefusal& r) {
  if (!r.from_dns) {
    return {{"network.allow", key,
             with_port(r.name, r.port) +
                 (r.used ? " was used under --learn and is not in network.allow; the exact name "
                           "and port used"
                         : " is not in network.allow; the exact name and port refused"),
             r.ev, r.used}};
  }
  const std::string what = r.used ? "the lookup of " + r.name + " was answered under --learn"
                                  : "the lookup of " + r.name + " was refused";
  // Only the lookup was refused, so no connection says the port: getaddrinfo's service does.
  const auto& ports = g.lookup_ports[r.name];
  if (ports.empty()) {
    return {{"network.allow", r.name,
             what + " and no connection followed, and the program named no port; this entry "
                    "allows every port of that name",
             r.ev, r.used}};
  }
  std::vector<Suggestion> out;
  for (int64_t p : ports) {
    out.push_back({"network.allow", with_port(r.name, p),
                   what + (r.reason.empty() ? "" : " (" + r.reason + ")") + "; port " +
                       std::to_string(p) + " is the service the program asked for",
                   r.ev, r.used});
  }
  return out;
}

// Many refused names under one domain: said, but each stays listed exactly.
void subdomain_notes(const std::vector<Suggestion>& net, Report& rep) {
  std::map<std::string, std::set<std::string>> by_parent;
  for (const auto& s : net) {
    std::string host = s.entry.substr(0, s.entry.rfind(':'));
    if (std::string p = parent_domain(host); !p.empty()) {
      by_parent[p].insert(host);
    }
  }
  for (const auto& [parent, names] : by_parent) {
    if (names.size() >= kSubdomainHint) {
      rep.notes.push_back(std::to_string(names.size()) + " names under " + parent +
                          " were refused; each is listed exactly. \"*." + parent +
                          "\" would cover them and any other name under it: add it by hand only "
                          "if that is what you mean");
    }
  }
}

void suggest_network(Gathered& g, Report& rep) {
  // A refused lookup whose name also had a refused connection (through the proxy settings) is
  // the same need: the connection's name:port says it exactly.
  std::set<std::string> names_with_port;
  for (const auto& [key, r] : g.net) {
    if (!r.from_dns) {
      names_with_port.insert(r.name);
    }
  }
  std::vector<Suggestion> net;
  for (auto& [key, r] : g.net) {
    if (r.from_dns && names_with_port.count(r.name) > 0) {
      continue;
    }
    if (auto c = g.by_client.find(r.first_client); c != g.by_client.end()) {
      r.ev.first_process = c->second;
    } else if (r.from_dns) {
      r.ev.first_process = g.lookup_process[r.name];
    }
    if (std::string hold = net_hold_reason(r); !hold.empty()) {
      rep.held_back.push_back({key, hold, r.ev});
      continue;
    }
    auto entries = net_entries(g, key, r);
    net.insert(net.end(), entries.begin(), entries.end());
  }
  subdomain_notes(net, rep);
  rep.add.insert(rep.add.end(), net.begin(), net.end());
  for (auto& h : g.exfil) {
    rep.held_back.push_back(std::move(h));
  }
}

// ---- filesystem ----

struct FsContext {
  const policy::Policy& policy;
  std::string workspace;
  const std::set<std::string>& canaries;
};

bool exists_on_host(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Whether a failed open is noise rather than a refusal a grant answers: relative (workspace)
// paths, the sandbox's own directories, and paths that exist nowhere on the host (probes).
bool fs_noise(const FsContext& c, const FsAttempt& a) {
  if (a.path.empty() || a.path[0] != '/' || composed_by_cordon(a.path) ||
      (!c.workspace.empty() && beneath(a.path, c.workspace))) {
    return true;
  }
  return !exists_on_host(a.path) && !(a.write && exists_on_host(parent_of(a.path)));
}

// Why a refused host path gets no grant, or "" when it should get one.
std::string fs_hold_reason(const FsContext& c, const FsAttempt& a) {
  if (c.canaries.count(a.path) > 0) {
    return "a canary's decoy: never granted";
  }
  if (a.rule.rfind("filesystem.deny", 0) == 0 || a.rule.rfind("filesystem.protect", 0) == 0) {
    return "refused by " + a.rule + "; deny rules win, so no grant is suggested";
  }
  const auto& fs = c.policy.filesystem;
  for (size_t i = 0; i < fs.deny.size(); ++i) {
    if (fs.deny[i].matches(a.path)) {
      return "denied by filesystem.deny[" + std::to_string(i) + "] (" + fs.deny[i].text +
             "); deny wins, so no grant is suggested";
    }
  }
  if (a.path.empty() || a.path[0] != '/' ||
      (!c.workspace.empty() && beneath(a.path, c.workspace))) {
    return "refused inside the workspace by " + (a.rule.empty() ? std::string("cordon") : a.rule) +
           "; suggest only grants host paths outside it";
  }
  return {};
}

// The entry for a refused path: the path itself when it exists on the host (a file or a
// directory), its directory when a write would create it. Never "/" or the home directory itself.
std::string fs_entry(const FsAttempt& a, const std::string& home) {
  if (exists_on_host(a.path)) {
    return a.path;
  }
  std::string parent = parent_of(a.path);
  return parent == "/" || parent == home ? "" : parent;
}

// Directories that exist to hold the host's service sockets (the system's runtime directory, the
// users' beneath it, X11's and ICE's).
constexpr const char* kSocketDirs[] = {"/run", "/var/run", "/tmp/.X11-unix", "/tmp/.ICE-unix"};

bool is_socket(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// The first socket beneath the directory `dir`, or "". The walk does not follow symlinks and is
// bounded (a data set's directory can be huge): past the bound the directory counts as free of
// them, which the socket directories above do not rely on.
std::string socket_beneath(const std::string& dir) {
  namespace fs = std::filesystem;
  constexpr size_t kMaxEntries = 4096;
  constexpr int kMaxDepth = 4;
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) {
    return {};
  }
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  for (size_t n = 0; !ec && it != fs::recursive_directory_iterator() && n < kMaxEntries;
       it.increment(ec), ++n) {
    if (it.depth() >= kMaxDepth) {
      it.disable_recursion_pending();
    }
    std::error_code sec;
    if (fs::is_socket(it->symlink_status(sec))) {
      return it->path().string();
    }
  }
  return {};
}

std::string real_path(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) {
    return {};
  }
  std::string out = real;
  std::free(real);
  return out;
}

// Why `entry` (the grant a refused `path` calls for) is never suggested, or "": a grant of a
// socket lets the sandbox connect to the service behind it (/var/run/docker.sock is the host),
// and a grant of cordon's own state would let the program read or rewrite its records. Checked
// as written and as the host resolves it, since a symlink can lead into either.
std::string grant_hold_reason(const std::string& path, const std::string& entry,
                              const std::string& state_dir) {
  std::vector<std::string> forms{entry};
  if (std::string real = real_path(entry); !real.empty() && real != entry) {
    forms.push_back(real);
  }
  if (!state_dir.empty()) {
    std::vector<std::string> states{state_dir};
    if (std::string real = real_path(state_dir); !real.empty() && real != state_dir) {
      states.push_back(real);
    }
    for (const auto& f : forms) {
      for (const auto& st : states) {
        if (beneath(f, st) || beneath(st, f)) {
          return "not suggested: " + entry + (beneath(f, st) ? " is in" : " holds") +
                 " cordon's own state directory (" + state_dir +
                 "), where its session records are kept";
        }
      }
    }
  }
  const std::string kSocket = "not suggested: a socket grants a connection to a host service (";
  if (is_socket(path)) {
    return kSocket + path + " is a socket)";
  }
  for (const auto& f : forms) {
    for (const char* dir : kSocketDirs) {
      if (beneath(f, dir)) {
        return kSocket + f + " is in " + dir + ", which holds the host's service sockets)";
      }
      if (beneath(dir, f)) {
        return kSocket + f + " holds " + dir + ", which holds the host's service sockets)";
      }
    }
  }
  if (std::string sock = socket_beneath(entry); !sock.empty()) {
    return kSocket + entry + " holds the socket " + sock + ")";
  }
  return {};
}

void suggest_filesystem(const Gathered& g, const Inputs& in, Report& rep) {
  FsContext c{*in.policy, in.workspace.empty() ? g.workspace : in.workspace, g.canary_paths};
  std::map<std::string, Suggestion> write, read;
  for (auto [key, a] : g.fs) {
    if (auto by = g.fs_refused_by.find(a.path); !a.rule.empty() && by != g.fs_refused_by.end()) {
      a.ev.first_process = by->second;
    }
    // cordon-fs and the shim's file rules refused it (fs.refused): a refusal even where the
    // path is not a grant's; a failed open the shim saw only when it is not noise.
    if (a.rule.empty() && fs_noise(c, a)) {
      continue;
    }
    if (std::string hold = fs_hold_reason(c, a); !hold.empty()) {
      rep.held_back.push_back({a.path, hold, a.ev});
      continue;
    }
    if (!exists_on_host(a.path) && !(a.write && exists_on_host(parent_of(a.path)))) {
      continue;  // nothing there to grant
    }
    std::string entry = fs_entry(a, in.home);
    if (!plain_path(a.path)) {
      rep.held_back.push_back(
          {a.path, "not a plain path (glob characters, \".\" or \"..\"); not suggested", a.ev});
      continue;
    }
    if (entry.empty() || (!in.home.empty() && beneath(in.home, entry))) {
      rep.held_back.push_back(
          {a.path,
           "the entry would be " +
               (entry.empty() ? std::string("/ or the home directory") : entry) +
               ", which holds the home directory; not suggested",
           a.ev});
      continue;
    }
    if (std::string hold = grant_hold_reason(a.path, entry, in.state_dir); !hold.empty()) {
      rep.held_back.push_back({a.path, hold, a.ev});
      continue;
    }
    auto& into = a.write ? write : read;
    auto [it, fresh] = into.try_emplace(entry);
    Suggestion& s = it->second;
    if (fresh) {
      s.field = a.write ? "filesystem.write" : "filesystem.read";
      s.entry = entry;
      s.why = a.path + " is outside the workspace and not granted; " +
              (entry == a.path ? std::string("the refused path itself")
                               : "its directory, since the write creates it");
      s.evidence = a.ev;
    } else {
      s.evidence.count += a.ev.count;
    }
  }
  // A read beneath a suggested write grant is answered by it: one entry, not two.
  for (auto& [entry, s] : write) {
    for (auto it = read.begin(); it != read.end();) {
      if (beneath(it->first, entry)) {
        s.evidence.count += it->second.evidence.count;
        s.why += "; also answers the read of " + it->first;
        it = read.erase(it);
      } else {
        ++it;
      }
    }
    rep.add.push_back(s);
  }
  for (auto& [entry, s] : read) {
    rep.add.push_back(s);
  }
}

// ---- exec ----

void suggest_exec(const Gathered& g, const Inputs& in, Report& rep) {
  if (in.policy->process.exec_allow.empty()) {
    return;  // any program may run: nothing was refused
  }
  auto dirs =
      exec_allow_paths(in.policy->process, in.workspace.empty() ? g.workspace : in.workspace);
  if (!dirs.ok()) {
    rep.notes.push_back("process.exec_allow could not be read back: " + dirs.error().to_string());
    return;
  }
  for (const auto& exec : g.execs) {
    // Named, not a structured binding: clang 14 cannot capture one in the lambda below.
    const std::string& path = exec.first;
    const auto& ev = exec.second;
    bool allowed = std::any_of(dirs->begin(), dirs->end(),
                               [&](const std::string& d) { return beneath(path, d); });
    if (!allowed && !plain_path(path)) {
      rep.held_back.push_back(
          {path, "not a plain path (glob characters, \".\" or \"..\"); not suggested", ev});
    } else if (!allowed) {
      // Landlock refused it (EACCES): exec_allow is exactly what Landlock was given.
      rep.add.push_back({"process.exec_allow", path,
                         path + " is not beneath any process.exec_allow entry; the program itself",
                         ev});
    }
  }
}

// ---- tighten ----

void tighten(const Gathered& g, const Inputs& in, Report& rep) {
  const auto& allow = in.policy->network.allow;
  for (size_t i = 0; i < allow.size(); ++i) {
    if (g.allow_used.count(i) == 0) {
      rep.unused.push_back({"network.allow[" + std::to_string(i) + "]", allow[i].text,
                            "no connection, request or DNS answer of this session used it"});
    }
  }
  const auto& fs = in.policy->filesystem;
  if (!g.all_opens) {
    if (!fs.read.empty() || !fs.write.empty()) {
      rep.notes.push_back(
          "filesystem.read and filesystem.write are not judged: this record holds no successful "
          "opens (run with CORDON_SHIM_FS_EVENTS=all in the program's environment to record them)");
    }
    return;
  }
  auto used = [&](const policy::PathPattern& p) {
    return std::any_of(g.opened.begin(), g.opened.end(), [&](const std::string& o) {
      return p.matches(o) || beneath(o, p.expanded);
    });
  };
  for (const auto* list : {&fs.read, &fs.write}) {
    const char* field = list == &fs.read ? "filesystem.read" : "filesystem.write";
    for (size_t i = 0; i < list->size(); ++i) {
      if (!used((*list)[i])) {
        rep.unused.push_back({std::string(field) + "[" + std::to_string(i) + "]", (*list)[i].text,
                              "no open beneath it was recorded"});
      }
    }
  }
}

// Why the loader refuses `s` as the only entry of its list, or "": each suggestion is checked on
// its own, so that one entry no policy can hold does not stop the others from being applied.
std::string loader_refusal(const Suggestion& s, const std::string& home) {
  const size_t dot = s.field.find('.');
  nlohmann::json p = {{"version", 1}};
  p[s.field.substr(0, dot)][s.field.substr(dot + 1)] = nlohmann::json::array({s.entry});
  policy::LoadOptions lo;
  lo.home = home;
  lo.source_name = "suggestion";
  try {
    (void)policy::parse_policy(p.dump(), lo);
  } catch (const policy::PolicyError& e) {
    std::string what = e.what();
    const std::string prefix = e.field_path() + ": ";
    const size_t at = what.find(prefix);
    return at == std::string::npos ? what : what.substr(at + prefix.size());
  }
  return {};
}

std::string evidence_lines(const Evidence& e, const std::string& indent) {
  std::string out = indent + "count: " + std::to_string(e.count);
  if (!e.first_time.empty()) {
    out += ", first at " + text::local_clock(e.first_time);
  }
  out += "\n";
  out += indent + "first process: " +
         (e.first_process.empty() ? std::string("(not attributed)") : e.first_process) + "\n";
  if (!e.example.empty()) {
    out += indent + "example: " + e.example + "\n";
  }
  return out;
}

nlohmann::json evidence_json(const Evidence& e) {
  return {{"count", e.count},
          {"first_time", e.first_time},
          {"first_process", e.first_process},
          {"example", e.example}};
}

}  // namespace

Report build_report(int events_fd, const Inputs& in) {
  Report rep;
  rep.session = in.session;
  rep.learn = in.learn;
  Gathered g = gather(events_fd, in, &rep.truncated);
  suggest_network(g, rep);
  suggest_filesystem(g, in, rep);
  suggest_exec(g, in, rep);
  // Two refusals that call for the same entry (a lookup's port and a connection's, say) are one
  // suggestion with both counted.
  std::vector<Suggestion> unique;
  for (auto& s : rep.add) {
    auto same = std::find_if(unique.begin(), unique.end(), [&](const Suggestion& u) {
      return u.field == s.field && u.entry == s.entry;
    });
    if (same == unique.end()) {
      unique.push_back(std::move(s));
    } else {
      same->evidence.count += s.evidence.count;
    }
  }
  rep.add.clear();
  for (auto& s : unique) {
    if (std::string why = loader_refusal(s, in.home); !why.empty()) {
      rep.held_back.push_back(
          {s.entry, "not suggested: cordon does not take it as a " + s.field + " entry: " + why,
           s.evidence});
    } else {
      rep.add.push_back(std::move(s));
    }
  }
  if (in.tighten) {
    tighten(g, in, rep);
  }
  return rep;
}

std::string format_text(const Report& r) {
  std::string out;
  const std::string session = "session " + r.session + (r.learn ? " (learn mode)" : "");
  if (r.add.empty()) {
    out += session +
           (r.learn ? ": nothing to suggest: the policy it was given allows everything it used and "
                      "no refusal in its record is answered by an allow entry\n"
                    : ": nothing to suggest: no refusal in its record is answered by an allow "
                      "entry\n");
  } else {
    out += session + ": " + std::to_string(r.add.size()) +
           (r.add.size() == 1 ? " addition" : " additions") +
           (r.learn ? " to the policy it was given, for what it used and what was refused" : "") +
           "\n";
  }
  for (const auto& s : r.add) {
    out += "  " + s.field + " += \"" + text::one_line(s.entry, kField) + "\"\n";
    out += "    why: " + text::one_line(s.why, 400) + "\n";
    out += evidence_lines(s.evidence, "    ");
  }
  if (!r.held_back.empty()) {
    out += "Not suggested:\n";
    for (const auto& h : r.held_back) {
      out += "  " + text::one_line(h.what, kField) + ": " + text::one_line(h.reason, 600) + "\n";
      out += evidence_lines(h.evidence, "    ");
    }
  }
  if (!r.unused.empty()) {
    out += "Never used (--tighten proposes removing):\n";
    for (const auto& u : r.unused) {
      out += "  " + u.field + " \"" + text::one_line(u.entry, kField) + "\": " + u.why + "\n";
    }
  }
  for (const auto& n : r.notes) {
    out += "Note: " + text::one_line(n, 600) + "\n";
  }
  if (r.truncated) {
    out += "(only the first 16 MiB of events.jsonl were read)\n";
  }
  return out;
}

nlohmann::json to_json(const Report& r) {
  nlohmann::json add = nlohmann::json::array(), held = nlohmann::json::array(),
                 unused = nlohmann::json::array();
  for (const auto& s : r.add) {
    add.push_back({{"field", s.field},
                   {"entry", s.entry},
                   {"why", s.why},
                   {"used", s.used},
                   {"evidence", evidence_json(s.evidence)}});
  }
  for (const auto& h : r.held_back) {
    held.push_back(
        {{"what", h.what}, {"reason", h.reason}, {"evidence", evidence_json(h.evidence)}});
  }
  for (const auto& u : r.unused) {
    unused.push_back({{"field", u.field}, {"entry", u.entry}, {"why", u.why}});
  }
  return {{"session", r.session},    {"learn", r.learn}, {"add", add},
          {"held_back", held},       {"unused", unused}, {"notes", r.notes},
          {"truncated", r.truncated}};
}

}  // namespace cordon::launcher::suggest
