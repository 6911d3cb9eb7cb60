// The network part of the session record in words: exit summary lines and `cordon log --net`.
#include "launcher/session/net_summary.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "launcher/session/session_store.h"
#include "launcher/session/session_text.h"

namespace cordon::launcher {
namespace {

constexpr size_t kMaxScanBytes = 16u << 20;
constexpr size_t kField = 120;  // characters of a hostile string shown
// The status column of plain-HTTP requests cordon refused (each got a 403 with the rule).
constexpr char kRefusedStatus[] = "403 (refused by cordon)";

std::string str(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) {
    return {};
  }
  if (it->is_string()) {
    return text::one_line(it->get_ref<const std::string&>(), kField);
  }
  if (it->is_number_integer() || it->is_number_unsigned()) {
    return std::to_string(it->get<int64_t>());
  }
  return {};
}

uint64_t num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it != j.end() && it->is_number_unsigned()) {
    return it->get<uint64_t>();
  }
  if (it != j.end() && it->is_number_integer() && it->get<int64_t>() > 0) {
    return static_cast<uint64_t>(it->get<int64_t>());
  }
  return 0;
}

std::string with_port(const std::string& host, const std::string& port) {
  if (port.empty() || port == "0") {
    return host;
  }
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
}

void add_refusal(NetStats& s, const nlohmann::json& ev, std::string what, std::string reason) {
  ++s.refusal_count;
  if (s.refusals.size() < kMaxRefusals) {
    s.refusals.push_back({text::local_clock(str(ev, "ts")), std::move(what), std::move(reason),
                          str(ev, "rule"), str(ev, "client")});
  }
}

void account(NetStats& s, const nlohmann::json& ev) {
  std::string kind = str(ev, "kind");
  std::string source = str(ev, "source");
  if (kind == "net.attribution" &&
      (str(ev, "of") == "net.refused" || str(ev, "of") == "net.exfil") && !str(ev, "exe").empty()) {
    std::string exe = str(ev, "exe");
    std::string by = exe.substr(exe.rfind('/') + 1);
    if (auto pid = ev.find("pid"); pid != ev.end() && pid->is_number_integer()) {
      by += " (pid " + std::to_string(pid->get<int64_t>()) + ")";
    }
    s.refused_by[str(ev, "client")] = by;
    return;
  }
  // The proxy's events are the record of what crossed (or was refused at) the boundary. The
  // shim's own net.* events are per-process attempts (connect to the proxy's sockets, lookups)
  // and would count every connection twice.
  if (source != "netproxy" && !(kind == "net.proxy_exit" && source == "launcher")) {
    return;
  }
  if (kind == "net.connect") {
    auto& h = s.hosts[host_of(ev)];
    ++h.connections;
    h.bytes_out += num(ev, "bytes_out");
    h.bytes_in += num(ev, "bytes_in");
  } else if (kind == "net.http") {
    ++s.hosts[host_of(ev)].requests;
    std::string m = str(ev, "method");
    ++s.methods[m.empty() ? "(none)" : m];
    std::string st = str(ev, "status");
    ++s.statuses[st.empty() ? "(none)" : st];
  } else if (kind == "net.refused") {
    std::string proto = str(ev, "proto");
    std::string what = with_port(host_of(ev), str(ev, "port"));
    if (!proto.empty() && proto != "tcp") {
      what = proto + " " + what;  // a packet the ruleset dropped (UDP, ICMP, ...)
    }
    ++s.hosts[host_of(ev)].refused;
    add_refusal(s, ev, std::move(what), str(ev, "reason"));
    // A plain-HTTP request cordon refused is a request too: its method, answered 403 by cordon.
    if (std::string m = str(ev, "method"); !m.empty()) {
      ++s.methods[m];
      ++s.statuses[kRefusedStatus];
    }
  } else if (kind == "net.exfil") {
    // A credential's placeholder headed to a host it is not bound to: refused with 403.
    ++s.hosts[host_of(ev)].refused;
    const std::string canary = str(ev, "canary");
    if (!canary.empty()) {
      s.canaries_sent.insert(canary);
    }
    add_refusal(s, ev, with_port(host_of(ev), str(ev, "port")),
                "net.exfil: " +
                    (canary.empty() ? "the placeholder of " + str(ev, "credential")
                                    : "the " + canary + " canary") +
                    " in its " + str(ev, "channel"));
    if (std::string m = str(ev, "method"); !m.empty()) {
      ++s.methods[m];
      ++s.statuses[kRefusedStatus];
    }
  } else if (kind == "net.dns") {
    if (str(ev, "decision") == "deny") {
      ++s.dns_refused;
      std::string rcode = str(ev, "rcode");
      add_refusal(s, ev, "DNS " + str(ev, "type") + " " + str(ev, "name"),
                  rcode.empty() ? "refused" : rcode);
    } else {
      ++s.dns_answered;
    }
  } else if (kind == "limit.hit" && ev.contains("cap")) {
    ++s.limits_hit;
    add_refusal(s, ev, "cap " + str(ev, "cap"),
                "limit reached" + (str(ev, "name").empty() ? "" : " at " + str(ev, "name")));
  } else if (kind == "net.proxy_exit") {
    s.proxy_exits.push_back(str(ev, "reason"));
  }
}

struct Ranked {
  std::string name;
  NetStats::Host h;
};

std::vector<Ranked> ranked(const NetStats& s) {
  std::vector<Ranked> v;
  for (const auto& [name, h] : s.hosts) {
    if (h.connections + h.requests > 0) {
      v.push_back({name, h});
    }
  }
  std::sort(v.begin(), v.end(), [](const Ranked& a, const Ranked& b) {
    uint64_t ab = a.h.bytes_in + a.h.bytes_out, bb = b.h.bytes_in + b.h.bytes_out;
    if (a.h.connections != b.h.connections) {
      return a.h.connections > b.h.connections;
    }
    return ab != bb ? ab > bb : a.name < b.name;
  });
  return v;
}

std::string host_line(const Ranked& r) {
  std::string s = r.name + " (" + std::to_string(r.h.connections) +
                  (r.h.connections == 1 ? " connection" : " connections");
  if (r.h.requests > 0) {
    s += ", " + std::to_string(r.h.requests) + (r.h.requests == 1 ? " request" : " requests");
  }
  return s + ", " + text::size(r.h.bytes_out) + " out, " + text::size(r.h.bytes_in) + " in)";
}

std::string count_map(const std::map<std::string, uint64_t>& m) {
  std::vector<std::pair<std::string, uint64_t>> v(m.begin(), m.end());
  std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [k, n] : v) {
    out +=
        "  " + k + std::string(k.size() < 10 ? 10 - k.size() : 1, ' ') + std::to_string(n) + "\n";
  }
  return out;
}

}  // namespace

std::string host_of(const nlohmann::json& ev) {
  std::string h = str(ev, "name");
  if (h.empty()) {
    h = str(ev, "address");
  }
  if (h.empty()) {
    h = str(ev, "dst");
  }
  return h.empty() ? "(unknown)" : h;
}

NetStats collect_net_stats(int events_fd) {
  NetStats s;
  auto r = store::for_each_line(
      events_fd, kMaxScanBytes, [&](size_t, std::string_view line, bool complete) {
        // Most lines are not the network's: skip them unparsed.
        if (!complete || (line.find("\"net.") == std::string_view::npos &&
                          line.find("\"limit.hit\"") == std::string_view::npos)) {
          return;
        }
        nlohmann::json ev = store::parse_event(line);
        if (ev.is_object()) {
          account(s, ev);
        }
      });
  s.truncated = r.ok() && *r;
  return s;
}

std::string net_exit_lines(const NetStats& s) {
  if (!s.any()) {
    return "cordon: network: no connections\n";
  }
  std::string out;
  auto hosts = ranked(s);
  uint64_t conns = 0, out_b = 0, in_b = 0;
  for (const auto& r : hosts) {
    conns += r.h.connections;
    out_b += r.h.bytes_out;
    in_b += r.h.bytes_in;
  }
  out += "cordon: network: " + std::to_string(conns) +
         (conns == 1 ? " connection" : " connections") + " to " + std::to_string(hosts.size()) +
         (hosts.size() == 1 ? " host" : " hosts") + ", " + text::size(out_b) + " out, " +
         text::size(in_b) + " in";
  if (s.refusal_count > 0) {
    out += ", " + std::to_string(s.refusal_count) + " refused";
  }
  out += "\n";
  for (size_t i = 0; i < hosts.size() && i < 3; ++i) {
    out += "cordon:   " + host_line(hosts[i]) + "\n";
  }
  if (hosts.size() > 3) {
    out += "cordon:   ... and " + std::to_string(hosts.size() - 3) + " more\n";
  }
  // Refusals grouped by what was refused, most frequent first.
  std::map<std::string, std::pair<uint64_t, std::string>> by_what;
  for (const auto& r : s.refusals) {
    auto& e = by_what[r.what];
    ++e.first;
    if (e.second.empty()) {
      e.second = r.reason;
    }
  }
  std::vector<std::pair<std::string, std::pair<uint64_t, std::string>>> v(by_what.begin(),
                                                                          by_what.end());
  std::stable_sort(v.begin(), v.end(),
                   [](auto& a, auto& b) { return a.second.first > b.second.first; });
  for (size_t i = 0; i < v.size() && i < 3; ++i) {
    const auto& [what, e] = v[i];
    out += "cordon:   refused: " + what + (e.first > 1 ? " x" + std::to_string(e.first) : "") +
           (e.second.empty() ? "" : " - " + text::one_line(e.second, 100)) + "\n";
  }
  if (v.size() > 3) {
    out += "cordon:   ... and " + std::to_string(v.size() - 3) +
           " more refused; see cordon log --net\n";
  }
  for (const auto& why : s.proxy_exits) {
    out += "cordon: warning: " + why + "\n";
  }
  return out;
}

std::string net_report(const NetStats& s) {
  std::string out;
  auto hosts = ranked(s);
  out += "Hosts (" + std::to_string(hosts.size()) + "):\n";
  for (const auto& r : hosts) {
    out += "  " + host_line(r) + "\n";
  }
  if (hosts.empty()) {
    out += "  (none)\n";
  }
  out += "Methods:\n" + (s.methods.empty() ? std::string("  (no plaintext HTTP requests)\n")
                                           : count_map(s.methods));
  out += "Statuses:\n" + (s.statuses.empty() ? std::string("  (no plaintext HTTP requests)\n")
                                             : count_map(s.statuses));
  out += "DNS: " + std::to_string(s.dns_answered) + " answered, " + std::to_string(s.dns_refused) +
         " refused\n";
  out += "Refused (" + std::to_string(s.refusal_count) + "):\n";
  for (const auto& r : s.refusals) {
    out += "  " + r.time + "  " + r.what;
    if (!r.reason.empty()) {
      out += "  " + text::one_line(r.reason, 200);
    }
    if (!r.rule.empty()) {
      out += "  [" + r.rule + "]";
    }
    if (auto by = s.refused_by.find(r.client); !r.client.empty() && by != s.refused_by.end()) {
      out += "  by " + by->second;
    }
    out += "\n";
  }
  if (s.refusal_count > s.refusals.size()) {
    out += "  ... and " + std::to_string(s.refusal_count - s.refusals.size()) + " more\n";
  }
  for (const auto& why : s.proxy_exits) {
    out += "Warning: " + why + "\n";
  }
  if (s.truncated) {
    out += "(only the first 16 MiB of events.jsonl were read)\n";
  }
  return out;
}

void finish_network(std::optional<NetproxyProcess>& proxy, const Session& session,
                    SessionEnd& end) {
  if (!proxy) {
    return;
  }
  // Dead before the program ended: the sandbox lost its network mid-session. Say so, in the log
  // and in the summary.
  if (auto st = proxy->exited(); st) {
    nlohmann::json f = {{"reason", describe_netproxy_exit(*st)}};
    if (WIFSIGNALED(*st)) {
      f["signal_name"] = text::signal_name(WTERMSIG(*st));
    } else {
      f["exit_code"] = WEXITSTATUS(*st);
    }
    (void)session.events().emit("net.proxy_exit", std::move(f), record::Tier::kEssential);
  }
  proxy->stop();
  proxy.reset();
  auto fd = ::open(session.paths().events.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return;
  }
  UniqueFd events(fd);
  const NetStats stats = collect_net_stats(events.get());
  end.canaries_touched.insert(stats.canaries_sent.begin(), stats.canaries_sent.end());
  end.net_lines = net_exit_lines(stats);
}

}  // namespace cordon::launcher
