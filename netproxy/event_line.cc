// Hand-built event lines for the hot events.
#include "netproxy/event_line.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>

namespace cordon::netproxy {

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 if the bytes there are not one (overlong
// forms, surrogates and code points above U+10FFFF included, as nlohmann's decoder rejects them).
size_t utf8_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  const size_t left = s.size() - i;
  auto cont = [&](size_t k) { return k < left && (b(k) & 0xC0) == 0x80; };
  if (c < 0x80) {
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF) {
    return cont(1) ? 2 : 0;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) {
      return 0;
    }
    if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F)) {
      return 0;  // overlong, or a UTF-16 surrogate
    }
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) {
      return 0;
    }
    if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F)) {
      return 0;  // overlong, or above U+10FFFF
    }
    return 4;
  }
  return 0;
}

void append_key(std::string& out, std::string_view key) {
  append_json_string(out, key);
  out.push_back(':');
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    // The common case first: a run of printable ASCII other than a quote or a backslash, at once.
    size_t run = i;
    while (run < s.size()) {
      const auto r = static_cast<uint8_t>(s[run]);
      if (r < 0x20 || r >= 0x80 || r == '"' || r == '\\') {
        break;
      }
      ++run;
    }
    if (run > i) {
      out.append(s.data() + i, run - i);
      i = run;
      continue;
    }
    const auto c = static_cast<uint8_t>(s[i]);
    if (c >= 0x80) {
      const size_t n = utf8_len(s, i);
      if (n == 0) {
        out.append("\xEF\xBF\xBD");  // U+FFFD for the invalid byte
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\b':
        out.append("\\b");
        break;
      case '\f':
        out.append("\\f");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default:  // the other control characters (printable ASCII took the run above)
        out.append("\\u00");
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 0xF]);
    }
    ++i;
  }
  out.push_back('"');
}

EventLine& EventLine::push(const Field& f) {
  if (n_ == kMaxFields) {
    overflow_ = true;
  } else {
    fields_[n_++] = f;
  }
  return *this;
}

EventLine& EventLine::add(std::string_view key, std::string_view value) {
  return push(Field{key, Field::Kind::String, value});
}

EventLine& EventLine::add(std::string_view key, uint64_t value) {
  return push(Field{key, Field::Kind::Unsigned, {}, value});
}

EventLine& EventLine::add(std::string_view key, int64_t value) {
  return push(Field{key, Field::Kind::Signed, {}, 0, value});
}

EventLine& EventLine::add(std::string_view key, bool value) {
  return push(Field{key, Field::Kind::Bool, {}, value ? 1u : 0u});
}

std::string EventLine::text(std::string_view ts, std::string_view session) const {
  // The common fields join the event's; a later duplicate key is dropped (as a json object keeps
  // one value per key; the event's own fields never use these names).
  std::array<Field, kMaxFields + 4> all{};
  size_t n = 0;
  all[n++] = Field{"kind", Field::Kind::String, kind_};
  all[n++] = Field{"session", Field::Kind::String, session};
  all[n++] = Field{"source", Field::Kind::String, source_};
  all[n++] = Field{"ts", Field::Kind::String, ts};
  for (size_t k = 0; k < n_; ++k) {
    all[n++] = fields_[k];
  }
  // A stable insertion sort: a couple of dozen fields, nearly in order already, and unlike
  // std::stable_sort no temporary buffer allocated per event.
  for (size_t k = 1; k < n; ++k) {
    const Field f = all[k];
    size_t j = k;
    for (; j > 0 && f.key < all[j - 1].key; --j) {
      all[j] = all[j - 1];
    }
    all[j] = f;
  }
  std::string out;
  out.reserve(512);
  out.push_back('{');
  char num[24];
  for (size_t k = 0; k < n; ++k) {
    const Field& f = all[k];
    if (k > 0 && f.key == all[k - 1].key) {
      continue;
    }
    if (out.size() > 1) {
      out.push_back(',');
    }
    append_key(out, f.key);
    switch (f.kind) {
      case Field::Kind::String:
        append_json_string(out, f.s);
        break;
      case Field::Kind::Unsigned: {
        auto r = std::to_chars(num, num + sizeof num, f.u);
        out.append(num, r.ptr);
        break;
      }
      case Field::Kind::Signed: {
        auto r = std::to_chars(num, num + sizeof num, f.i);
        out.append(num, r.ptr);
        break;
      }
      case Field::Kind::Bool:
        out.append(f.u != 0 ? "true" : "false");
        break;
    }
  }
  out.push_back('}');
  return out;
}

nlohmann::json EventLine::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (size_t k = 0; k < n_; ++k) {
    const Field& f = fields_[k];
    std::string key(f.key);
    if (j.contains(key)) {
      continue;
    }
    switch (f.kind) {
      case Field::Kind::String:
        j[key] = std::string(f.s);
        break;
      case Field::Kind::Unsigned:
        j[key] = f.u;
        break;
      case Field::Kind::Signed:
        j[key] = f.i;
        break;
      case Field::Kind::Bool:
        j[key] = f.u != 0;
        break;
    }
  }
  j["kind"] = std::string(kind_);
  return j;
}

Status EventLine::write(const record::EventLog& log) const {
  if (!log.enabled()) {
    return {};
  }
  if (overflow_) {
    return make_error("event " + std::string(kind_) + " has more than " +
                      std::to_string(kMaxFields) + " fields");
  }
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  std::array<char, 27> ts_buf;
  std::string_view ts = record::format_rfc3339(now, ts_buf);
  std::string ts_slow;
  if (ts.empty()) {
    ts_slow = record::now_rfc3339();
    ts = ts_slow;
  }
  std::string line = text(ts, log.session());
  if (line.size() + 1 > record::kMaxLine) {
    return log.write(to_json());  // rare: EventLog truncates the long strings
  }
  line.push_back('\n');
  return log.append(kind_, line);
}

}  // namespace cordon::netproxy
