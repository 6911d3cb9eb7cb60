// otlp_logs_body: each line parsed without exceptions (its bytes came partly from the sandbox),
// its common fields lifted into attributes, the line itself kept as the body.
#include "launcher/sidecars/otlp_records.h"

#include <nlohmann/json.hpp>

#include "launcher/session/session_text.h"

namespace cordon::launcher {

namespace {

using nlohmann::json;

json string_attr(const char* key, const std::string& v) {
  return {{"key", key}, {"value", {{"stringValue", v}}}};
}

// 64-bit integers travel as decimal strings in OTLP's JSON (protobuf's JSON mapping).
json int_attr(const char* key, int64_t v) {
  return {{"key", key}, {"value", {{"intValue", std::to_string(v)}}}};
}

bool is_warning(const json& e) {
  auto text = [&](const char* k) {
    auto it = e.find(k);
    return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string kind = text("kind");
  return text("decision") == "deny" || kind == "limit.hit" || kind == "record.dropped" ||
         (kind.size() > 8 && kind.compare(kind.size() - 8, 8, ".refused") == 0);
}

json log_record(const std::string& line, int64_t observed_ns) {
  json rec = {{"observedTimeUnixNano", std::to_string(observed_ns)},
              {"body", {{"stringValue", line}}}};
  json e = json::parse(line, nullptr, false);
  if (!e.is_object()) {
    rec["timeUnixNano"] = std::to_string(observed_ns);
    rec["severityNumber"] = 9;
    rec["severityText"] = "INFO";
    rec["attributes"] = json::array();
    return rec;
  }
  int64_t us = -1;
  if (auto ts = e.find("ts"); ts != e.end() && ts->is_string()) {
    us = text::epoch_micros(ts->get_ref<const std::string&>());
  }
  rec["timeUnixNano"] = std::to_string(us >= 0 ? us * 1000 : observed_ns);
  const bool warn = is_warning(e);
  rec["severityNumber"] = warn ? 13 : 9;
  rec["severityText"] = warn ? "WARN" : "INFO";
  json attrs = json::array();
  for (auto [field, key] : {std::pair{"kind", "cordon.kind"},
                            {"session", "cordon.session"},
                            {"source", "cordon.source"},
                            {"decision", "cordon.decision"},
                            {"rule", "cordon.rule"},
                            {"exe", "process.executable.path"}}) {
    if (auto it = e.find(field); it != e.end() && it->is_string()) {
      attrs.push_back(string_attr(key, it->get<std::string>()));
    }
  }
  if (auto it = e.find("pid"); it != e.end() && it->is_number_integer()) {
    attrs.push_back(int_attr("process.pid", it->get<int64_t>()));
  }
  rec["attributes"] = std::move(attrs);
  return rec;
}

}  // namespace

std::string otlp_logs_body(const std::vector<std::string>& lines, std::string_view session,
                           std::string_view cordon_version, int64_t observed_ns) {
  json records = json::array();
  for (const std::string& line : lines) {
    records.push_back(log_record(line, observed_ns));
  }
  json resource = {{"attributes",
                    {string_attr("service.name", "cordon"),
                     string_attr("service.version", std::string(cordon_version)),
                     string_attr("cordon.session", std::string(session))}}};
  json scope = {{"name", "cordon"}, {"version", std::string(cordon_version)}};
  json body = {
      {"resourceLogs",
       {{{"resource", std::move(resource)},
         {"scopeLogs", {{{"scope", std::move(scope)}, {"logRecords", std::move(records)}}}}}}}};
  // Paths and argv in the lines are bytes, not necessarily UTF-8: replace, never throw.
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace cordon::launcher
