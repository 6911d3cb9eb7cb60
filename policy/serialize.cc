// The effective policy as canonical JSON (to_json) and as one line of prose per rule (explain).
#include "policy/serialize.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "policy/loader.h"
#include "policy/presets.h"

namespace cordon::policy {
namespace {

using json = nlohmann::json;

const char* mode_name(WorkspaceMode m) {
  switch (m) {
    case WorkspaceMode::Cow:
      return "cow";
    case WorkspaceMode::Ro:
      return "ro";
    case WorkspaceMode::Rw:
      return "rw";
  }
  return "cow";
}

const char* deny_style_name(DenyStyle s) { return s == DenyStyle::Hide ? "hide" : "eacces"; }

// Sizes as a number of bytes when they have no exact unit, else "64M": both re-parse exactly.
json size_json(uint64_t bytes) {
  std::string s = format_size(bytes);
  if (s.find_first_not_of("0123456789") == std::string::npos) {
    return bytes;
  }
  return s;
}

template <typename T>
json texts(const std::vector<T>& v) {
  json a = json::array();
  for (const auto& x : v) {
    a.push_back(x.text);
  }
  return a;
}

// "1 GiB", "64 MiB", "1.5 GiB", "1000 bytes": for people, not for re-parsing.
std::string human_size(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  }
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (std::fabs(v - std::round(v)) < 0.005) {
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.2g %s", v, kUnits[u]);
    if (v >= 10) {
      std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
    }
  }
  return buf;
}

std::string ports_text(const HostPattern& p) {
  if (p.port_lo == 0 && p.port_hi == 65535) {
    return "any port";
  }
  if (p.port_lo == p.port_hi) {
    return "port " + std::to_string(p.port_lo);
  }
  return "ports " + std::to_string(p.port_lo) + "-" + std::to_string(p.port_hi);
}

std::string host_text(const HostPattern& p) {
  switch (p.kind) {
    case HostPattern::Kind::Exact:
      return p.name;
    case HostPattern::Kind::Suffix:
      return "any subdomain of " + p.name.substr(1);
    case HostPattern::Kind::AnyName:
      return "any host name (not raw IP addresses)";
    case HostPattern::Kind::Ip:
      return p.net.addr.to_string();
    case HostPattern::Kind::Cidr:
      return "addresses in " + p.net.addr.to_string() + "/" + std::to_string(p.net.prefix);
  }
  return p.text;
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (const auto& s : v) {
    out += (out.empty() ? "" : sep) + s;
  }
  return out;
}

std::string limit(uint64_t n, const std::string& what_unlimited, const std::string& text) {
  return n == 0 ? what_unlimited : text;
}

}  // namespace

json to_json(const Policy& p) {
  const NetworkPolicy& n = p.network;
  json resolve = json::object();
  for (const auto& [name, ips] : n.resolve) {
    json a = json::array();
    for (const auto& ip : ips) {
      a.push_back(ip.to_string());
    }
    resolve[name] = a;
  }
  json network = {
      {"allow", texts(n.allow)},
      {"deny", texts(n.deny)},
      {"max_connections", n.max_connections},
      {"max_connections_per_host", n.max_connections_per_host},
      {"connections_per_minute", n.connections_per_minute},
      {"max_bytes_out", size_json(n.max_bytes_out)},
      {"max_bytes_in", size_json(n.max_bytes_in)},
      {"idle_timeout", format_duration(n.idle_timeout)},
      {"connect_timeout", format_duration(n.connect_timeout)},
      {"resolve", resolve},
      {"dns", {{"types", n.dns_types}}},
      {"proxy_env", n.proxy_env},
  };
  if (!n.rules.empty()) {
    json rules = json::array();
    for (const auto& r : n.rules) {
      json e = {{"host", r.host.text}, {"action", r.allow ? "allow" : "deny"}};
      if (!r.methods.empty()) {
        e["methods"] = r.methods;
      }
      if (!r.paths.empty()) {
        e["paths"] = r.paths;
      }
      rules.push_back(std::move(e));
    }
    network["rules"] = std::move(rules);
  }
  if (!n.inspect.empty()) {
    network["inspect"] = texts(n.inspect);
  }
  if (!n.inspect_exclude.empty()) {
    network["inspect_exclude"] = texts(n.inspect_exclude);
  }
  if (!n.credentials.empty()) {
    json creds = json::array();
    for (const auto& c : n.credentials) {
      json one = {{"env", c.env}, {"hosts", texts(c.hosts)}};
      if (!c.header.empty()) {
        one["header"] = c.header;
      }
      if (c.plain_http) {
        one["plain_http"] = true;
      }
      creds.push_back(std::move(one));
    }
    network["credentials"] = std::move(creds);
  }
  if (n.kill_on_exfil) {
    network["on_exfil"] = "kill";
  }
  if (!n.ca_cert.empty()) {
    network["ca"] = {{"cert", n.ca_cert}, {"key", n.ca_key}};
  }
  const FilesystemPolicy& f = p.filesystem;
  json filesystem = {
      {"workspace", f.workspace},
      {"mode", mode_name(f.mode)},
      {"read", texts(f.read)},
      {"write", texts(f.write)},
      {"deny", texts(f.deny)},
      {"deny_write", texts(f.deny_write)},
      {"protect", texts(f.protect)},
      {"deny_style", deny_style_name(f.deny_style)},
      {"quota", {{"bytes", size_json(f.quota.bytes)}, {"inodes", f.quota.inodes}}},
      {"tmp", size_json(f.tmp)},
      {"xattrs", f.xattrs},
  };
  const ProcessPolicy& pr = p.process;
  json env = {
      {"keep", pr.env.keep},
      {"set", pr.env.set},
      {"deny", pr.env.deny},
      {"pass", pr.env.pass},
  };
  json process = {
      {"memory", size_json(pr.memory)},
      {"cpus", pr.cpus},
      {"pids", pr.pids},
      {"nofile", pr.nofile},
      {"fsize", size_json(pr.fsize)},
      {"timeout", format_duration(pr.timeout)},
      {"kill_grace", format_duration(pr.kill_grace)},
      {"env", env},
      {"exec_allow", texts(pr.exec_allow)},
      {"seccomp", {{"allow", pr.seccomp.allow}, {"deny", pr.seccomp.deny}}},
      {"nested_sandbox", pr.nested_sandbox},
      {"hostname", pr.hostname},
  };
  // nlohmann::json objects keep keys sorted, so the output is canonical by construction.
  json record = {
      {"max_bytes", size_json(p.record.max_bytes)},
      {"events_per_second", p.record.events_per_second},
  };
  if (!p.record.events_to.empty()) {
    record["events_to"] = p.record.events_to;
  }
  if (!p.record.otlp.empty()) {
    record["otlp"] = p.record.otlp;
  }
  json out{{"version", p.version},
           {"network", network},
           {"filesystem", filesystem},
           {"process", process},
           {"record", record}};
  if (!p.extends.empty()) {
    // Re-applying the preset to its own expansion adds nothing: the record still round-trips.
    out["extends"] = p.extends;
  }
  if (p.canaries != default_canaries()) {
    out["canaries"] = p.canaries.empty() ? json(false) : json(p.canaries);
  }
  return out;
}

json to_record_json(const Policy& p) {
  json j = to_json(p);
  json& set = j["process"]["env"]["set"];
  for (auto it = set.begin(); it != set.end(); ++it) {
    if (p.process.env.is_secret(it.key())) {
      *it = kRedactedValue;
    }
  }
  return j;
}

std::string cpus_text(double cpus) {
  char n[32];
  std::snprintf(n, sizeof n, "%g", cpus);
  return cpus == 0 ? "unlimited CPU" : cpus == 1.0 ? "1 CPU" : std::string(n) + " CPUs";
}

std::string explain(const Policy& p) {
  std::vector<std::string> lines;
  if (const Preset* preset = find_preset(p.extends)) {
    lines = explain_preset(*preset);
    lines.push_back("The whole policy, the preset included:");
  }
  const NetworkPolicy& n = p.network;

  // Network.
  if (n.allow.empty()) {
    lines.push_back("network: no outbound connections (network.allow is empty)");
  } else if (n.max_connections == 0) {
    lines.push_back("network: no outbound connections (network.max_connections is 0)");
  } else {
    for (size_t i = 0; i < n.allow.size(); ++i) {
      std::string line = "network: allow " + host_text(n.allow[i]) + " " + ports_text(n.allow[i]) +
                         " (network.allow[" + std::to_string(i) + "])";
      if (n.allow[i].names_host_loopback()) {
        line +=
            ": a service on the host's own loopback; the sandbox's other loopback ports stay "
            "its own and no other port of the host's is reachable";
      }
      lines.push_back(line);
    }
  }
  for (size_t i = 0; i < n.deny.size(); ++i) {
    lines.push_back("network: deny " + host_text(n.deny[i]) + " " + ports_text(n.deny[i]) +
                    " (network.deny[" + std::to_string(i) + "], wins over allow)");
  }
  if (!n.allow.empty()) {
    lines.push_back(
        "network: private, loopback, link-local and cloud-metadata addresses refused unless an "
        "allow entry names them");
    lines.push_back("network: at most " + std::to_string(n.max_connections) +
                    " connections open, " + std::to_string(n.max_connections_per_host) +
                    " per host, " + std::to_string(n.connections_per_minute) + " new per minute");
    lines.push_back("network: upload budget " +
                    limit(n.max_bytes_out, "unlimited", human_size(n.max_bytes_out)) +
                    ", download budget " +
                    limit(n.max_bytes_in, "unlimited", human_size(n.max_bytes_in)));
    lines.push_back(
        "network: connect timeout " + format_duration(n.connect_timeout) + ", idle timeout " +
        (n.idle_timeout.count() == 0 ? std::string("none") : format_duration(n.idle_timeout)));
    lines.push_back("network: DNS answers " + join(n.dns_types, "/") +
                    " records for allowed names only; every other query gets NXDOMAIN");
    lines.push_back(std::string("network: proxy variables ") + (n.proxy_env ? "set" : "not set") +
                    " (network.proxy_env)");
  }
  std::vector<std::string> ruled;  // hosts some rule names, in order, once each
  for (size_t i = 0; i < n.rules.size(); ++i) {
    const HttpRule& r = n.rules[i];
    lines.push_back("network: HTTP " + std::string(r.allow ? "allow " : "deny ") +
                    (r.methods.empty() ? std::string("any method") : join(r.methods, "/")) +
                    " to " + host_text(r.host) + " " +
                    (r.paths.empty() ? std::string("on any path") : "on " + join(r.paths)) +
                    " (network.rules[" + std::to_string(i) + "])");
    if (std::find(ruled.begin(), ruled.end(), r.host.text) == ruled.end()) {
      ruled.push_back(r.host.text);
    }
  }
  if (!ruled.empty()) {
    lines.push_back("network: HTTP requests to " + join(ruled) +
                    " that no rule allows are refused with 403, over plain HTTP and inspected "
                    "HTTPS (paths decoded and normalised once, see docs/policy.md)");
  }
  std::vector<std::string> inspected = ruled;
  for (const auto& h : n.inspect) {
    if (std::find(inspected.begin(), inspected.end(), h.text) == inspected.end()) {
      inspected.push_back(h.text);
    }
  }
  for (const auto& c : n.credentials) {
    for (const auto& h : c.hosts) {
      if (std::find(inspected.begin(), inspected.end(), h.text) == inspected.end()) {
        inspected.push_back(h.text);
      }
    }
  }
  if (inspected.empty()) {
    lines.push_back(
        "network: HTTPS is not inspected: the proxy sees names and byte counts only "
        "(network.inspect)");
  } else {
    const std::string ca = n.ca_cert.empty()
                               ? "a CA made for the session (its key in the session directory, "
                                 "never in the sandbox)"
                               : "the CA " + n.ca_cert;
    lines.push_back(
        "network: HTTPS to " + join(inspected) +
        " is inspected (network.inspect and the hosts network.rules and network.credentials "
        "name): the proxy ends TLS "
        "with a certificate from " +
        ca +
        ", which the sandbox trusts (its /etc/ssl/certs/ca-certificates.crt and SSL_CERT_FILE, "
        "NODE_EXTRA_CA_CERTS and the like name the host's CAs plus this one), checks the "
        "server's certificate against the host's trust store, and logs every request");
  }
  if (!n.inspect_exclude.empty()) {
    std::vector<std::string> ex;
    for (const auto& h : n.inspect_exclude) {
      ex.push_back(host_text(h));
    }
    lines.push_back("network: HTTPS to " + join(ex) +
                    " is never inspected (network.inspect_exclude): it passes through as is");
  }
  for (const auto& c : n.credentials) {
    std::vector<std::string> hosts;
    for (const auto& h : c.hosts) {
      hosts.push_back(host_text(h));
    }
    lines.push_back(
        "network: the sandbox sees " + c.env +
        " only as a random placeholder of the same shape; the proxy puts the real value (from "
        "cordon's environment, never written to disk) in place of the placeholder in the URL, "
        "headers, body and trailers of requests to " +
        join(hosts) + (c.header.empty() ? std::string() : " and sets \"" + c.header + "\" there") +
        (c.plain_http ? " over inspected HTTPS and plain HTTP (plain_http: the value crosses the "
                        "network unencrypted)"
                      : " over inspected HTTPS only (plain HTTP to them carries the placeholder; "
                        "plain_http: true would put the value there too)") +
        ", and refuses with 403 (a net.exfil event) any request to another host whose URL or "
        "headers carry the placeholder, or whose body carries it as is, in hex, base64 or "
        "URL-encoded (network.credentials)");
  }
  if (n.kill_on_exfil) {
    lines.push_back(
        "network: a credential's placeholder or a canary sent toward a host it is not bound to "
        "also ends the session, exit status 123 (network.on_exfil: kill)");
  }
  for (const auto& [name, ips] : n.resolve) {
    std::vector<std::string> s;
    for (const auto& ip : ips) {
      s.push_back(ip.to_string());
    }
    lines.push_back("network: " + name + " resolves to " + join(s) + " (network.resolve)");
  }

  // Filesystem.
  const FilesystemPolicy& f = p.filesystem;
  std::string mode = f.mode == WorkspaceMode::Cow  ? "copy-on-write"
                     : f.mode == WorkspaceMode::Ro ? "read-only"
                                                   : "read-write (changes go straight to disk)";
  std::string quota =
      (f.quota.bytes == 0 ? std::string("no byte limit") : human_size(f.quota.bytes)) + " / " +
      (f.quota.inodes == 0 ? std::string("no inode limit")
                           : std::to_string(f.quota.inodes) + " inodes");
  // How the rules hold where the program can write is said where it applies: a rule that
  // cordon could only apply to files present at start would be a promise it does not keep.
  std::string ws_rules;
  bool rules_in_workspace = !f.rules_beneath(f.workspace.empty() ? "." : f.workspace, true).empty();
  if (f.mode == WorkspaceMode::Rw && rules_in_workspace) {
    ws_rules =
        "; through a cordon-fs view, so deny, deny_write and protect are decided at every "
        "access, files created, renamed or linked later included (cordon refuses to start "
        "where cordon-fs cannot run)";
  } else if (f.mode == WorkspaceMode::Cow && rules_in_workspace) {
    ws_rules =
        "; through cordon-fs deny, deny_write and protect are decided at every access; on kernel "
        "overlayfs (no FUSE for this user) they cover the files present at start, and what the "
        "program creates stays in the session until `cordon commit`";
  } else if (f.mode == WorkspaceMode::Ro && rules_in_workspace) {
    ws_rules = "; what filesystem.deny names is hidden at start (nothing can be created in it)";
  }
  lines.push_back("filesystem: workspace " + f.workspace + " " + mode +
                  (f.mode == WorkspaceMode::Ro ? "" : "; quota " + quota) + ws_rules);
  if (f.mode == WorkspaceMode::Cow) {
    lines.push_back(f.xattrs ? std::string("filesystem: extended attributes: kept in the workspace "
                                           "and committed (filesystem.xattrs)")
                             : std::string("filesystem: extended attributes: not kept (the view "
                                           "answers ENOTSUP to setting one and shows none, not "
                                           "even a workspace file's own; filesystem.xattrs)"));
  }
  for (size_t i = 0; i < f.read.size(); ++i) {
    std::string line = "filesystem: read-only " + f.read[i].expanded + " (filesystem.read[" +
                       std::to_string(i) + "])";
    if (!f.rules_beneath(f.read[i].expanded, false).empty()) {
      line +=
          "; what filesystem.deny names in it is hidden at start (nothing can be created in "
          "a read-only grant)";
    }
    lines.push_back(line);
  }
  for (size_t i = 0; i < f.write.size(); ++i) {
    const std::string& path = f.write[i].expanded;
    std::string line =
        "filesystem: read-write " + path + " (filesystem.write[" + std::to_string(i) + "])";
    Decision whole = f.decide_write(path);
    auto rules = f.rules_beneath(path, false);
    if (!f.decide_read(path).allow) {
      line = "filesystem: not shown: " + path + " (filesystem.write[" + std::to_string(i) + "]), " +
             f.decide_read(path).rule + " wins";
    } else if (!whole.allow) {
      line = "filesystem: read-only " + path + " (filesystem.write[" + std::to_string(i) +
             "]): " + whole.rule + " covers all of it";
    } else if (!rules.empty()) {
      // The rules written for this path first; the general ones (**/.env, ...) counted.
      std::stable_partition(rules.begin(), rules.end(),
                            [](const auto& r) { return !r.text.empty() && r.text[0] != '*'; });
      std::string names;
      for (size_t k = 0; k < rules.size() && k < 4; ++k) {
        names += (names.empty() ? "" : ", ") + rules[k].text;
      }
      if (rules.size() > 4) {
        names += " and " + std::to_string(rules.size() - 4) + " more";
      }
      line += "; inside it " + names +
              " hold for files created, renamed or linked later too: a directory is served "
              "through a cordon-fs view, decided at every access (cordon refuses to start where "
              "cordon-fs cannot run)";
    }
    lines.push_back(line);
  }
  if (f.read.empty() && f.write.empty()) {
    lines.push_back(
        "filesystem: nothing of the host outside the workspace except system "
        "directories (read-only)");
  }
  auto texts_of = [](const std::vector<PathPattern>& v) {
    std::vector<std::string> s;
    for (const auto& x : v) {
      s.push_back(x.text);
    }
    return s;
  };
  if (!f.deny.empty()) {
    lines.push_back(std::string("filesystem: never readable or writable: ") +
                    join(texts_of(f.deny)) + " (filesystem.deny, shown as " +
                    (f.deny_style == DenyStyle::Hide ? "missing" : "permission denied") + ")");
  }
  if (!f.deny_write.empty()) {
    lines.push_back("filesystem: never writable: " + join(texts_of(f.deny_write)) +
                    " (filesystem.deny_write)");
  }
  if (!f.protect.empty()) {
    lines.push_back("filesystem: write-protected (would run code on the host): " +
                    join(texts_of(f.protect)) + " (filesystem.protect)");
  }
  lines.push_back("filesystem: /tmp " +
                  (f.tmp == 0 ? std::string("without a size limit") : human_size(f.tmp)));

  // Process.
  const ProcessPolicy& pr = p.process;
  std::string cpu_text = cpus_text(pr.cpus);
  lines.push_back("process: memory " + limit(pr.memory, "unlimited", human_size(pr.memory)) + ", " +
                  cpu_text + ", " +
                  limit(pr.pids, "unlimited tasks", std::to_string(pr.pids) + " tasks") +
                  ", timeout " + (pr.timeout.count() == 0 ? "none" : format_duration(pr.timeout)));
  lines.push_back("process: " + std::to_string(pr.nofile) + " open files, largest file " +
                  limit(pr.fsize, "unlimited", human_size(pr.fsize)) + ", SIGKILL " +
                  format_duration(pr.kill_grace) + " after SIGTERM, hostname " + pr.hostname);
  if (pr.exec_allow.empty()) {
    lines.push_back("process: any program may be executed");
  } else {
    lines.push_back("process: may execute only " + join(texts_of(pr.exec_allow)) +
                    " (process.exec_allow)");
  }
  if (!pr.seccomp.deny.empty()) {
    lines.push_back("process: syscalls also refused: " + join(pr.seccomp.deny) +
                    " (process.seccomp.deny)");
  }
  if (!pr.seccomp.allow.empty()) {
    lines.push_back("process: syscalls lifted from the built-in deny list: " +
                    join(pr.seccomp.allow) + " (process.seccomp.allow)");
  }
  if (pr.nested_sandbox) {
    lines.push_back(
        "process: may create user and mount namespaces and mount in them "
        "(process.nested_sandbox), so its own sandbox (bubblewrap) works as a second layer. "
        "RISK: a new user namespace hands the program every capability over the namespaces it "
        "creates, the kernel attack surface most container escapes start from; cordon's "
        "Landlock layer is off (Landlock forbids those mounts); the rest of the seccomp filter, "
        "the mounts and the network capture stay");
  } else {
    lines.push_back(
        "process: creating user namespaces is refused and recorded (an agent's own bubblewrap "
        "sandbox cannot start; process.nested_sandbox: true allows it)");
  }
  std::string env_line =
      "environment: keeps " + (pr.env.keep.empty() ? std::string("nothing") : join(pr.env.keep));
  if (!pr.env.deny.empty()) {
    env_line += "; strips " + join(pr.env.deny);
  }
  lines.push_back(env_line);
  for (const auto& name : pr.env.pass) {
    std::string line = "environment: passes " + name + " from the host (process.env.pass)";
    if (auto d = pr.env.denied_by(name)) {
      line += " although process.env.deny[" + std::to_string(*d) + "] (\"" + pr.env.deny[*d] +
              "\") matches it";
    }
    lines.push_back(line + "; its value is never recorded");
  }
  for (const auto& name : pr.env.keep) {
    if (auto d = pr.env.denied_by(name);
        d && std::find(pr.env.pass.begin(), pr.env.pass.end(), name) == pr.env.pass.end()) {
      lines.push_back("environment: " + name + " is kept but never passed: process.env.deny[" +
                      std::to_string(*d) + "] (\"" + pr.env.deny[*d] +
                      "\") wins over keep (process.env.pass hands it over)");
    }
  }
  if (!pr.env.set.empty()) {
    std::vector<std::string> s, secret;
    for (const auto& [k, v] : pr.env.set) {
      (pr.env.is_secret(k) ? secret : s).push_back(k);
    }
    if (!s.empty()) {
      lines.push_back("environment: sets " + join(s) + " (process.env.set)");
    }
    if (!secret.empty()) {
      lines.push_back("environment: sets " + join(secret) +
                      " (process.env.set), secrets whose values are not recorded");
    }
  }

  if (p.canaries.empty()) {
    lines.push_back("canaries: none planted (canaries: false)");
  } else {
    lines.push_back(
        "canaries: decoy secrets unique to the session are planted in the sandbox's view only (" +
        join(p.canaries) +
        "; never in the host's home or the workspace); a read of a decoy file is an fs.canary "
        "event, and a decoy value in a request the proxy sees (plain HTTP, inspected HTTPS) is "
        "refused with 403 and a net.exfil event (canaries)");
  }
  lines.push_back("record: events.jsonl at most " + human_size(p.record.max_bytes) +
                  " (record.max_bytes); " +
                  (p.record.events_per_second == 0
                       ? std::string("no rate limit")
                       : std::to_string(p.record.events_per_second) +
                             " events per second per writer and kind family, the rest counted") +
                  " (record.events_per_second)");

  std::string out;
  for (const auto& l : lines) {
    out += l + "\n";
  }
  return out;
}

}  // namespace cordon::policy
