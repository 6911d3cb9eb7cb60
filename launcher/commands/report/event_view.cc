// Display copies of events: escaped, bounded, without the per-line session id.
#include "launcher/commands/report/event_view.h"

#include "launcher/session/session_text.h"

namespace cordon::launcher::report {
namespace {

constexpr int kMaxDepth = 4;

nlohmann::json view_value(const nlohmann::json& v, int depth) {
  if (v.is_string()) {
    return shown(v.get_ref<const std::string&>());
  }
  if (!v.is_structured()) {
    return v;
  }
  if (depth >= kMaxDepth) {
    return shown(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  size_t n = 0;
  if (v.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& item : v) {
      if (n++ == kMaxItems) {
        out.push_back("… (" + std::to_string(v.size() - kMaxItems) + " more)");
        break;
      }
      out.push_back(view_value(item, depth + 1));
    }
    return out;
  }
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, item] : v.items()) {
    if (n++ == kMaxItems) {
      out["…"] = std::to_string(v.size() - kMaxItems) + " more fields";
      break;
    }
    out[shown(key)] = view_value(item, depth + 1);
  }
  return out;
}

}  // namespace

std::string shown(std::string_view s, size_t max) {
  if (s.size() <= max) {
    bool plain = true;
    for (char c : s) {
      plain &= c >= 0x20 && c < 0x7f;  // escaped() passes exactly these bytes through as they are
    }
    if (plain) {
      return std::string(s);
    }
  }
  return text::one_line(s, max);
}

nlohmann::json view_of(const nlohmann::json& ev) {
  nlohmann::json out = view_value(ev, 0);
  if (out.is_object()) {
    out.erase("session");
  }
  return out;
}

std::string str(const nlohmann::json& ev, const char* key) {
  auto it = ev.find(key);
  return it != ev.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t num(const nlohmann::json& ev, const char* key, int64_t fallback) {
  auto it = ev.find(key);
  if (it == ev.end()) {
    return fallback;
  }
  if (it->is_number_integer()) {
    return it->get<int64_t>();
  }
  if (it->is_number_unsigned()) {
    return static_cast<int64_t>(it->get<uint64_t>());
  }
  return fallback;
}

}  // namespace cordon::launcher::report
