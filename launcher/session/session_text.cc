// Text helpers for the session record's human views.
#include "launcher/session/session_text.h"

#include <string.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace cordon::launcher::text {

std::string duration(std::chrono::milliseconds d) {
  long long ms = d.count();
  if (ms < 0) {
    ms = 0;
  }
  char buf[64];
  if (ms < 1000) {
    std::snprintf(buf, sizeof buf, "%lldms", ms);
  } else if (ms < 60'000) {
    if (ms % 1000 == 0 || ms >= 10'000) {
      std::snprintf(buf, sizeof buf, "%llds", ms / 1000);
    } else {
      std::snprintf(buf, sizeof buf, "%lld.%llds", ms / 1000, (ms % 1000) / 100);
    }
  } else if (ms < 3'600'000) {
    long long s = ms / 1000;
    if (s % 60 == 0) {
      std::snprintf(buf, sizeof buf, "%lldm", s / 60);
    } else {
      std::snprintf(buf, sizeof buf, "%lldm%llds", s / 60, s % 60);
    }
  } else {
    long long m = ms / 60'000;
    if (m % 60 == 0) {
      std::snprintf(buf, sizeof buf, "%lldh", m / 60);
    } else {
      std::snprintf(buf, sizeof buf, "%lldh%lldm", m / 60, m % 60);
    }
  }
  return buf;
}

std::string size(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) {
    return std::to_string(bytes) + " B";
  }
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 5) {
    v /= 1024;
    ++unit;
  }
  char buf[64];
  double whole = static_cast<double>(static_cast<uint64_t>(v));
  if (v < 10 && v - whole >= 0.05) {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[unit]);
  }
  return buf;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string local_datetime(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm;
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

int64_t epoch_micros(std::string_view rfc3339) {
  std::tm tm{};
  int usec = 0;
  std::string ts(rfc3339);
  if (std::sscanf(ts.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%6dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &usec) < 6) {
    return -1;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const time_t t = timegm(&tm);
  if (t < 0 || usec < 0 || usec > 999999) {
    return -1;
  }
  return static_cast<int64_t>(t) * 1'000'000 + usec;
}

double epoch_seconds(std::string_view rfc3339) {
  const int64_t us = epoch_micros(rfc3339);
  return us < 0 ? -1
                : static_cast<double>(us / 1'000'000) + static_cast<double>(us % 1'000'000) / 1e6;
}

std::string local_clock(std::string_view ts) {
  // Exactly the shape EventLog writes: YYYY-MM-DDTHH:MM:SS.ffffffZ
  struct tm tm = {};
  int frac = 0;
  std::string s(ts);
  if (s.size() < 20 || s.back() != 'Z' ||
      std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%6d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &frac) != 7) {
    return one_line(ts, 40);
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  time_t t = timegm(&tm);
  struct tm local;
  localtime_r(&t, &local);
  // The fraction's first three digits are milliseconds whatever its length.
  std::string ms;
  for (size_t i = s.find('.') + 1; i < s.size() && ms.size() < 3 && s[i] >= '0' && s[i] <= '9';
       ++i) {
    ms.push_back(s[i]);
  }
  ms.resize(3, '0');
  char buf[64];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%s", local.tm_hour, local.tm_min, local.tm_sec,
                ms.c_str());
  return buf;
}

namespace {

// Length of the UTF-8 sequence at s[i] and its code point; 0 when the bytes there are not valid
// UTF-8 (overlong forms, surrogates, beyond U+10FFFF, truncated or stray continuation bytes).
size_t decode_utf8(std::string_view s, size_t i, char32_t* cp) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t n = c < 0x80             ? 1
             : (c & 0xe0) == 0xc0 ? 2
             : (c & 0xf0) == 0xe0 ? 3
             : (c & 0xf8) == 0xf0 ? 4
                                  : 0;
  if (n == 0 || i + n > s.size()) {
    return 0;
  }
  char32_t v = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) {
      return 0;
    }
    v = (v << 6) | (b(i + k) & 0x3f);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
    return 0;
  }
  *cp = v;
  return n;
}

// Characters that change how the text around them is drawn without being seen themselves.
bool reorders_or_hides(char32_t cp) {
  return (cp >= 0x200b && cp <= 0x200f) ||  // zero-width space/joiners, LRM, RLM
         (cp >= 0x202a && cp <= 0x202e) ||  // bidi embeddings and overrides
         (cp >= 0x2066 && cp <= 0x2069) ||  // bidi isolates
         cp == 0x2028 || cp == 0x2029 ||    // line and paragraph separators
         cp == 0x061c || cp == 0x2060 || cp == 0xfeff;
}

}  // namespace

std::string escaped(std::string_view s, EscapeOptions o) {
  std::string out;
  out.reserve(s.size());
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    size_t n = decode_utf8(s, i, &cp);
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
      continue;
    }
    if ((cp < 0x20 && !(o.keep_tab && cp == '\t')) || cp == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if ((cp >= 0x80 && cp <= 0x9f) || reorders_or_hides(cp)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp == '\\' && o.escape_backslash) {
      out += "\\\\";
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string one_line(std::string_view s, size_t max) {
  std::string out = escaped(s.substr(0, std::min(s.size(), max * 4 + 4)));
  if (out.size() <= max) {
    return out;
  }
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xc0) == 0x80) {
    --cut;  // never split a character
  }
  return out.substr(0, cut) + "...";
}

}  // namespace cordon::launcher::text
