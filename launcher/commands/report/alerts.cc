// Which events raise an alert, judged by kind, rule and reason as the proxy, cordon-fs and the
// launcher write them.
#include "launcher/commands/report/alerts.h"

#include "launcher/commands/report/event_view.h"
#include "launcher/session/session_text.h"

namespace cordon::launcher::report {
namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

std::string target(const nlohmann::json& ev) {
  std::string host = str(ev, "name");
  for (const char* k : {"host", "address", "ip", "dst"}) {
    if (host.empty()) {
      host = str(ev, k);
    }
  }
  int64_t port = num(ev, "port");
  return text::one_line(host, 200) + (port >= 0 ? ":" + std::to_string(port) : "");
}

std::string with_reason(std::string what, const nlohmann::json& ev) {
  std::string why = str(ev, "reason");
  if (why.empty()) {
    why = str(ev, "rule");
  }
  return why.empty() ? what : what + " (" + text::one_line(why, 300) + ")";
}

}  // namespace

std::optional<Alert> alert_of(const nlohmann::json& ev) {
  const std::string kind = str(ev, "kind");
  const std::string rule = str(ev, "rule"), reason = str(ev, "reason");
  const std::string canary = text::one_line(str(ev, "canary"), 40);
  if (has(kind, "exfil")) {
    return Alert{"exfil", with_reason((canary.empty() ? "exfiltration attempt toward "
                                                      : "canary " + canary + " sent toward ") +
                                          target(ev),
                                      ev)};
  }
  if (has(kind, "canary") || has(kind, "honeytoken")) {
    std::string what = str(ev, "path");
    return Alert{"canary", "canary touched: " + (canary.empty() ? "" : canary + ": ") +
                               text::one_line(what.empty() ? kind : what, 300)};
  }
  if (kind == "limit.hit") {
    std::string which = str(ev, "limit");
    if (which.empty()) {
      which = str(ev, "cap");
    }
    return Alert{"limit", "limit reached: " + text::one_line(which.empty() ? "?" : which, 100)};
  }
  if (kind == "proc.refused") {
    return Alert{"process", with_reason("process refused", ev)};
  }
  if (kind == "record.dropped") {
    return Alert{"record", "events not recorded (" + text::one_line(str(ev, "family"), 40) +
                               "): the record of this session is incomplete"};
  }
  if (kind != "net.refused" && kind != "net.dns") {
    return std::nullopt;
  }
  // "network (metadata address IP ...)" names a metadata address; the rule for the other
  // special ranges says "private/loopback/metadata" whichever it was.
  if (has(rule, "(metadata address") || has(reason, "(metadata address")) {
    return Alert{"metadata", with_reason("cloud metadata address refused: " + target(ev), ev)};
  }
  if (has(rule, "private") || has(rule, "special address") || has(reason, "private")) {
    return Alert{"private", with_reason("private-range address refused: " + target(ev), ev)};
  }
  if (has(rule, "name mismatch") || has(reason, "fronting")) {
    return Alert{"fronting", with_reason("name mismatch (domain fronting?): " + target(ev), ev)};
  }
  return std::nullopt;
}

void AlertBox::add(const Alert& a, size_t event_index) {
  for (auto& g : groups_) {
    if (g.alert.category == a.category && g.alert.text == a.text) {
      ++g.count;
      return;
    }
  }
  if (groups_.size() >= kMaxAlerts) {
    ++more_;
    return;
  }
  groups_.push_back({a, 1, event_index});
}

nlohmann::json AlertBox::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& g : groups_) {
    list.push_back({{"category", g.alert.category},
                    {"text", g.alert.text},
                    {"count", g.count},
                    {"ev", g.first}});
  }
  return {{"list", list}, {"more", more_}};
}

}  // namespace cordon::launcher::report
