// Text helpers for the session record's human views.
#include "launcher/session_text.h"

#include <string.h>

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

std::string one_line(std::string_view s, size_t max) {
  std::string out;
  out.reserve(s.size() < max ? s.size() : max);
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (out.size() >= max) {
      out += "...";
      break;
    }
    // C0 controls, DEL, and the C1 controls U+0080..U+009F (UTF-8 C2 80..C2 9F: CSI is one).
    bool c1 = c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
              static_cast<unsigned char>(s[i + 1]) <= 0x9f;
    if (c < 0x20 || c == 0x7f || c1) {
      char buf[16];
      if (c1) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(s[++i]));
      } else {
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
      }
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

}  // namespace cordon::launcher::text
