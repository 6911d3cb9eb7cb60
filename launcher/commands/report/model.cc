// One pass over the session's events into lanes, marks, alerts and network rows, plus the
// header from summary.json (or session.start/session.end when the summary is missing).
#include "launcher/commands/report/model.h"

#include <cmath>

#include "launcher/commands/report/alerts.h"
#include "launcher/commands/report/event_budget.h"
#include "launcher/commands/report/event_view.h"
#include "launcher/commands/report/network_table.h"
#include "launcher/commands/report/timeline.h"
#include "launcher/session/session_store.h"
#include "launcher/session/session_text.h"
#include "policy/loader.h"
#include "policy/serialize.h"

namespace cordon::launcher::report {
namespace {

// Fields of summary.json (or session.end) the header shows, copied as they are.
constexpr const char* kHeaderFields[] = {
    "exit_code",   "signal",      "signal_name", "timed_out", "duration_ms", "cpu_ms",
    "peak_memory", "limits",      "started_at",  "ended_at",  "workspace",   "cordon_version",
    "error",       "cow_backend", "limits_hit",  "record",    "uid",         "learn"};

nlohmann::json header(const SessionRecord& rec, const nlohmann::json* start,
                      const nlohmann::json* end) {
  nlohmann::json h = {{"session", rec.id}};
  auto take = [&](const nlohmann::json& from) {
    for (const char* k : kHeaderFields) {
      if (from.contains(k) && !h.contains(k)) {
        h[k] = view_of(from[k]);
      }
    }
  };
  if (rec.summary.is_object()) {
    take(rec.summary);
    if (rec.summary.contains("argv")) {
      h["argv"] = view_of(rec.summary["argv"]);
    }
  }
  if (end != nullptr) {
    take(*end);
  }
  if (start != nullptr) {
    take(*start);
    if (!h.contains("argv") && start->contains("argv")) {
      h["argv"] = view_of((*start)["argv"]);
    }
    if (!h.contains("started_at")) {
      h["started_at"] = str(*start, "ts");
    }
  }
  h["running"] = end == nullptr && !rec.summary.is_object();
  return h;
}

nlohmann::json policy_lines(const std::string& text) {
  nlohmann::json lines = nlohmann::json::array();
  if (text.empty()) {
    lines.push_back("(the session has no policy.json)");
    return lines;
  }
  try {
    std::string all = policy::explain(policy::parse_policy(text));
    size_t at = 0;
    while (at < all.size()) {
      size_t nl = all.find('\n', at);
      if (nl == std::string::npos) {
        nl = all.size();
      }
      lines.push_back(text::one_line(all.substr(at, nl - at), 4096));
      at = nl + 1;
    }
  } catch (const std::exception& e) {
    lines.push_back("(policy.json cannot be read: " + text::one_line(e.what(), 500) + ")");
  }
  return lines;
}

// Kept whole whatever the budget: what a reviewer came for.
bool notable(const nlohmann::json& ev, bool alert) {
  const std::string kind = str(ev, "kind");
  return alert || str(ev, "decision") == "deny" || kind.rfind("proc.", 0) == 0 ||
         kind.rfind("session.", 0) == 0 || kind == "fs.refused";
}

constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
constexpr size_t kWrapperBytes = 32;

// Bytes in the page: each '<', '>' and '&' becomes a six-byte escape there (page.h).
size_t dumped_size(const nlohmann::json& j) {
  const std::string s = j.dump(-1, ' ', false, kReplace);
  size_t n = s.size();
  for (char c : s) {
    n += (c == '<' || c == '>' || c == '&') ? 5 : 0;
  }
  return n;
}

// What the page keeps of an event it has no room for: its kind, its writer and its decision.
nlohmann::json brief_of(const nlohmann::json& ev) {
  nlohmann::json b = {{"kind", str(ev, "kind")}, {"source", str(ev, "source")}};
  if (ev.contains("decision")) {
    b["decision"] = ev["decision"];
  }
  return view_of(b);
}

double round_us(double ms) { return std::round(ms * 1000) / 1000; }

}  // namespace

void add_events(SessionRecord& rec, std::string_view jsonl) {
  size_t at = 0;
  while (at < jsonl.size()) {
    size_t nl = jsonl.find('\n', at);
    std::string_view line = jsonl.substr(at, nl == std::string_view::npos ? nl : nl - at);
    at = nl == std::string_view::npos ? jsonl.size() : nl + 1;
    if (line.empty()) {
      continue;
    }
    auto ev = line.size() <= store::kMaxLine ? store::parse_event(line) : nlohmann::json();
    if (ev.is_object()) {
      rec.events.push_back(std::move(ev));
    } else {
      ++rec.unparseable;
    }
  }
}

nlohmann::json build_model(const SessionRecord& rec) {
  const auto& events = rec.events;
  const nlohmann::json *start = nullptr, *end = nullptr;
  for (const auto& ev : events) {
    const std::string kind = str(ev, "kind");
    if (kind == "session.start" && start == nullptr && str(ev, "source") == "launcher") {
      start = &ev;
    } else if (kind == "session.end" && str(ev, "source") == "launcher") {
      end = &ev;
    }
  }
  // Times are milliseconds from the session's start; a line without a readable time takes its
  // predecessor's.
  double origin = -1;
  if (rec.summary.is_object() && rec.summary.contains("started_at")) {
    origin = text::epoch_seconds(str(rec.summary, "started_at"));
  }
  if (origin < 0 && start != nullptr) {
    origin = text::epoch_seconds(str(*start, "ts"));
  }
  std::vector<double> t_ms(events.size(), 0);
  double last = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    double s = text::epoch_seconds(str(events[i], "ts"));
    if (s >= 0 && origin < 0) {
      origin = s;
    }
    last = s >= 0 ? round_us((s - origin) * 1000) : last;
    t_ms[i] = last;
  }

  Timeline timeline(events, t_ms);
  AlertBox alerts;
  NetworkTable net;
  nlohmann::json refusals = nlohmann::json::array();
  std::vector<nlohmann::json> views(events.size());
  std::vector<EventCost> costs(events.size());
  std::vector<unsigned> folded(events.size());
  std::vector<bool> alerted(events.size());
  double t_end = 0;
  size_t all_whole = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& ev = events[i];
    const size_t lane = timeline.lane_of(i);
    auto alert = alert_of(ev);
    if (alert) {
      alerts.add(*alert, i);
    }
    alerted[i] = alert.has_value();
    net.add(ev, i, lane);
    if (str(ev, "kind") == "fs.refused" && refusals.size() < 1000) {
      refusals.push_back({{"path", text::one_line(str(ev, "path"), 1000)},
                          {"op", text::one_line(str(ev, "op"), 40)},
                          {"rule", text::one_line(str(ev, "rule"), 200)},
                          {"source", str(ev, "source")},
                          {"lane", lane},
                          {"ev", i}});
    }
    t_end = std::max(t_end, t_ms[i]);
    views[i] = view_of(ev);
    folded[i] = timeline.fold(views[i], lane);
    costs[i].whole = kWrapperBytes + dumped_size(views[i]);
    costs[i].notable = notable(ev, alert.has_value());
    all_whole += costs[i].whole;
  }
  nlohmann::json model = {{"header", header(rec, start, end)},
                          {"policy", policy_lines(rec.policy_text)},
                          {"alerts", alerts.to_json()},
                          {"lanes", timeline.lanes_json()},
                          {"t_end", t_end},
                          {"unparseable", rec.unparseable},
                          {"truncated", rec.truncated},
                          {"network", net.to_json()},
                          {"files", rec.files},
                          {"fs_refusals", std::move(refusals)}};
  // The events get what the rest of the page leaves of kPageBudget.
  const size_t rest = kPageOverhead + dumped_size(model);
  const size_t budget = rest < kPageBudget ? kPageBudget - rest : 0;
  if (all_whole > budget) {
    // Briefs are needed only now: making one for every event of a session that fits whole cost
    // a tenth of the build.
    for (size_t i = 0; i < events.size(); ++i) {
      costs[i].brief = kWrapperBytes + dumped_size(brief_of(events[i]));
    }
  }
  const auto fit = fit_events(costs, budget);
  nlohmann::json out_events = nlohmann::json::array();
  size_t summarized = 0, omitted = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (fit[i] == Fit::Omitted) {
      ++omitted;
      out_events.push_back(nullptr);  // keeps the indexes the alerts and rows point at
      continue;
    }
    nlohmann::json w = {{"t", t_ms[i]}, {"l", timeline.lane_of(i)}};
    if (fit[i] == Fit::Brief) {
      w["e"] = brief_of(events[i]);
      w["c"] = 1;  // the page says the event is cut, and where the whole one is
      ++summarized;
    } else {
      w["e"] = std::move(views[i]);
      if (folded[i] != 0) {
        w["f"] = folded[i];
      }
    }
    if (alerted[i]) {
      w["a"] = 1;
    }
    out_events.push_back(std::move(w));
  }
  model["events"] = std::move(out_events);
  model["summarized"] = summarized;
  model["omitted"] = omitted;
  return model;
}

}  // namespace cordon::launcher::report
