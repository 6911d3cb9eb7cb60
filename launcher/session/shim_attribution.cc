// The join behind "which command made this connection": proxy records x shim records on the
// client's local address, within a time window.
#include "launcher/session/shim_attribution.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <map>

#include "base/unique_fd.h"
#include "launcher/session/session_text.h"

namespace cordon::launcher {
namespace {

// Bound on the log read at the end of a session: past it, no attribution (said in the record).
constexpr off_t kMaxEventsBytes = 64 << 20;

double parse_ts(const std::string& ts) { return text::epoch_seconds(ts); }

std::string str(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::vector<nlohmann::json> attribute_connections(const std::vector<nlohmann::json>& events) {
  // local address -> the shim's connect records from it, in log order.
  std::map<std::string, std::vector<const nlohmann::json*>> by_local;
  for (const auto& e : events) {
    if (str(e, "source") == "shim" && str(e, "kind") == "net.connect" && e.contains("local")) {
      by_local[str(e, "local")].push_back(&e);
    }
  }
  std::vector<nlohmann::json> out;
  for (const auto& e : events) {
    std::string kind = str(e, "kind");
    if (str(e, "source") != "netproxy" ||
        (kind != "net.connect" && kind != "net.refused" && kind != "net.http" &&
         kind != "net.exfil" && kind != "net.decider")) {
      continue;
    }
    std::string client = str(e, "client");
    if (client.empty()) {
      continue;
    }
    nlohmann::json a = {{"kind", "net.attribution"}, {"of", kind}, {"client", client}};
    for (const char* k : {"name", "port", "address", "decision", "rule", "credential"}) {
      if (e.contains(k)) {
        a[k] = e[k];
      }
    }
    double t = parse_ts(str(e, "ts"));
    const nlohmann::json* best = nullptr;
    if (auto it = by_local.find(client); it != by_local.end()) {
      for (const nlohmann::json* s : it->second) {
        double st = parse_ts(str(*s, "ts"));
        // The latest shim record no later than the window after the proxy's: a port reused by a
        // later connection belongs to that later one.
        if (t < 0 || st < 0 || st <= t + kAttributionWindowSeconds) {
          if (t >= 0 && st >= 0 && st < t - 3600) {
            continue;  // an hour older: the port was reused since
          }
          best = s;
        }
      }
    }
    if (best != nullptr) {
      // The shim record's identity is the kernel's (preload_shim/collector/sender.h); what the
      // process itself claimed, where it differs, comes along labelled.
      for (const char* k : {"pid", "ppid", "exe", "argv", "argc", "cred", "claimed"}) {
        if (best->contains(k)) {
          a[k] = (*best)[k];
        }
      }
    } else {
      a["unattributed"] = true;
      a["reason"] =
          "no shim record from this client address: a statically linked program, raw "
          "syscalls or io_uring (the preload shim cannot see them)";
    }
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<nlohmann::json> attribute_fs_refusals(const std::vector<nlohmann::json>& events) {
  // host pid -> the shim's records of processes starting (or a fork about to exec) under it.
  std::map<int64_t, std::vector<const nlohmann::json*>> by_pid;
  for (const auto& e : events) {
    std::string kind = str(e, "kind");
    if (str(e, "source") != "shim" || (kind != "proc.start" && kind != "proc.exec")) {
      continue;
    }
    auto cred = e.find("cred");
    if (cred != e.end() && cred->is_object() && cred->contains("pid") &&
        (*cred)["pid"].is_number_integer()) {
      by_pid[(*cred)["pid"].get<int64_t>()].push_back(&e);
    }
  }
  std::vector<nlohmann::json> out;
  for (const auto& e : events) {
    if (str(e, "source") != "fusefs" || str(e, "kind") != "fs.refused" || !e.contains("pid") ||
        !e["pid"].is_number_integer()) {
      continue;
    }
    nlohmann::json a = {{"kind", "fs.attribution"}, {"of", "fs.refused"}, {"host_pid", e["pid"]}};
    for (const char* k : {"path", "op", "rule", "exe"}) {
      if (e.contains(k)) {
        a[k] = e[k];
      }
    }
    const std::string exe = str(e, "exe");
    const double t = parse_ts(str(e, "ts"));
    const nlohmann::json* best = nullptr;
    if (auto it = by_pid.find(e["pid"].get<int64_t>()); it != by_pid.end() && !exe.empty()) {
      for (const nlohmann::json* s : it->second) {
        double st = parse_ts(str(*s, "ts"));
        // The collector stamps records when it reads them, so they may trail the daemon's by a
        // little: the window; the exe match keeps an exec'ed successor's argv out.
        bool in_time = t < 0 || st < 0 || st <= t + kAttributionWindowSeconds;
        if (in_time && str(*s, "exe") == exe && str(*s, "kind") == "proc.start") {
          best = s;
        }
      }
    }
    if (best != nullptr) {
      a["pid"] = (*best).value("pid", nlohmann::json());
      for (const char* k : {"ppid", "argv", "argc"}) {
        if (best->contains(k)) {
          a[k] = (*best)[k];
        }
      }
    } else {
      a["unattributed"] = true;
      a["reason"] =
          "no shim record of this process: statically linked, or it ended before the shim "
          "reported it";
    }
    out.push_back(std::move(a));
  }
  return out;
}

Status record_connection_attribution(const std::string& events_path, const record::EventLog& log) {
  UniqueFd fd(::open(events_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return sys_error("open(\"" + events_path + "\") for connection attribution");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return sys_error("fstat(\"" + events_path + "\")");
  }
  if (st.st_size > kMaxEventsBytes) {
    return log.emit("net.attribution", {{"skipped", "events.jsonl is larger than 64 MiB"}});
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd.get(), data.data() + got, data.size() - got);
    if (n < 0) {
      return sys_error("read(\"" + events_path + "\")");
    }
    if (n == 0) {
      break;
    }
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  std::vector<nlohmann::json> events;
  bool any_joinable = false;
  for (size_t pos = 0; pos < data.size();) {
    size_t nl = data.find('\n', pos);
    if (nl == std::string::npos) {
      nl = data.size();
    }
    auto j = nlohmann::json::parse(data.begin() + static_cast<long>(pos),
                                   data.begin() + static_cast<long>(nl), nullptr, false);
    if (!j.is_discarded() && j.is_object()) {
      any_joinable = any_joinable || j.contains("client") ||
                     (j.value("kind", "") == "fs.refused" && j.value("source", "") == "fusefs");
      events.push_back(std::move(j));
    }
    pos = nl + 1;
  }
  if (!any_joinable) {
    return {};
  }
  for (auto& a : attribute_connections(events)) {
    TRY(log.write(std::move(a)));
  }
  for (auto& a : attribute_fs_refusals(events)) {
    TRY(log.write(std::move(a)));
  }
  return {};
}

}  // namespace cordon::launcher
