// Session ids: making them, recognising them, and resolving what a user typed (id, prefix, "last").
#include <cerrno>
#include <cstdio>
#include <ctime>

#include "launcher/session/session.h"
#include "launcher/session/session_store.h"

namespace cordon::launcher {

namespace store {

namespace {
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }
}  // namespace

bool is_session_id(std::string_view s) {
  if (s.size() != kIdLength || s[8] != '-' || s[15] != '-') {
    return false;
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 8 || i == 15) {
      continue;
    }
    if (i < 15 ? !is_digit(s[i]) : !is_hex(s[i])) {
      return false;
    }
  }
  return true;
}

bool is_id_text(std::string_view s) {
  if (s.empty() || s.size() > kIdLength) {
    return false;
  }
  for (char c : s) {
    if (!is_hex(c) && c != '-') {
      return false;
    }
  }
  return true;
}

std::string make_session_id(int64_t unix_seconds, uint32_t random24) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d%02d%02d-%02d%02d%02d-%06x", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, random24 & 0xffffffu);
  return buf;
}

int64_t session_id_time(std::string_view id) {
  if (!is_session_id(id)) {
    return -1;
  }
  auto num = [&](size_t pos, size_t len) {
    int v = 0;
    for (size_t i = pos; i < pos + len; ++i) {
      v = v * 10 + (id[i] - '0');
    }
    return v;
  };
  struct tm tm = {};
  tm.tm_year = num(0, 4) - 1900;
  tm.tm_mon = num(4, 2) - 1;
  tm.tm_mday = num(6, 2);
  tm.tm_hour = num(9, 2);
  tm.tm_min = num(11, 2);
  tm.tm_sec = num(13, 2);
  return static_cast<int64_t>(timegm(&tm));
}

}  // namespace store

namespace {
std::string join_ids(const std::vector<std::string>& ids, size_t from, size_t count) {
  std::string out;
  for (size_t i = from; i < ids.size() && i < from + count; ++i) {
    out += "\n  " + ids[i];
  }
  return out;
}
}  // namespace

Result<std::string> resolve_session(const std::string& root, std::string_view id) {
  // Checked before touching the filesystem: what reaches openat() is only ever [0-9a-f-].
  if (id != "last" && !store::is_id_text(id)) {
    return make_error("\"" + std::string(id) + "\" is not a session id",
                      "ids look like 20261122-105747-3f9a2c; `cordon ls` lists them, `last` is "
                      "the newest");
  }
  auto root_fd = store::open_root(root);
  if (!root_fd.ok()) {
    if (root_fd.error().code == ENOENT) {
      return make_error("no sessions under " + root, "`cordon run -- CMD` records one");
    }
    return std::move(root_fd).error();
  }
  ASSIGN_OR_RETURN(std::vector<std::string> ids, store::list_sessions(root_fd->get()));
  if (ids.empty()) {
    return make_error("no sessions under " + root, "`cordon run -- CMD` records one");
  }
  if (id == "last") {
    return ids.back();
  }
  std::vector<std::string> matches;
  for (const auto& s : ids) {
    if (s == id) {
      return s;
    }
    if (s.compare(0, id.size(), id) == 0) {
      matches.push_back(s);
    }
  }
  if (matches.size() == 1) {
    return matches.front();
  }
  if (matches.empty()) {
    size_t from = ids.size() > 5 ? ids.size() - 5 : 0;
    return make_error("no session \"" + std::string(id) + "\" under " + root +
                      "; the newest are:" + join_ids(ids, from, 5));
  }
  std::string msg = "\"" + std::string(id) + "\" is ambiguous (type more of the id); it starts " +
                    std::to_string(matches.size()) + " sessions:" + join_ids(matches, 0, 10);
  if (matches.size() > 10) {
    msg += "\n  ... and " + std::to_string(matches.size() - 10) + " more";
  }
  return make_error(std::move(msg));
}

}  // namespace cordon::launcher
