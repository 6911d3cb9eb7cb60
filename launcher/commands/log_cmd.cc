// `cordon log ID [--json] [--follow]`: the session's events.jsonl, pretty-printed one line per
// event, or raw; with --follow, live until the session ends.
#include <poll.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "launcher/diagnostics.h"
#include "launcher/session/line_splitter.h"
#include "launcher/session/net_summary.h"
#include "launcher/session/session.h"
#include "launcher/session/session_state.h"
#include "launcher/session/session_store.h"
#include "launcher/session/session_text.h"

namespace cordon::launcher {

namespace {

constexpr size_t kMaxValue = 200;    // per field
constexpr size_t kMaxPretty = 4096;  // per event: a line of 50k tiny fields stays readable

// Shown first, in this order, when present; every other field follows alphabetically.
constexpr std::array<std::string_view, 22> kPreferred = {
    "rule",   "host",      "port",        "ip",          "sni",   "method", "url",   "status",
    "path",   "op",        "pid",         "exe",         "argv",  "limit",  "value", "unit",
    "reason", "exit_code", "signal_name", "duration_ms", "error", "bytes"};
// Already in the fixed columns (or redundant with a shown field).
constexpr std::array<std::string_view, 8> kHidden = {"ts",       "session", "source", "kind",
                                                     "decision", "signal",  "v",      "chain"};

template <size_t N>
bool in(const std::array<std::string_view, N>& set, std::string_view key) {
  for (auto k : set) {
    if (k == key) {
      return true;
    }
  }
  return false;
}

std::string str_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool matches(const LogFilter& f, const nlohmann::json& ev) {
  if (!f.source.empty() && str_field(ev, "source") != f.source) {
    return false;
  }
  if (!f.decision.empty() && str_field(ev, "decision") != f.decision) {
    return false;
  }
  if (!f.kind_prefixes.empty()) {
    std::string kind = str_field(ev, "kind");
    bool any = false;
    for (const auto& p : f.kind_prefixes) {
      any = any || kind.rfind(p, 0) == 0;
    }
    if (!any) {
      return false;
    }
  }
  return true;
}

std::string value_text(const nlohmann::json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    std::string t = text::one_line(s, kMaxValue);
    if (s.empty() || s.find_first_of(" \t\"") != std::string::npos) {
      std::string q = "\"";
      for (char c : t) {
        q += c == '"' ? std::string("\\\"") : std::string(1, c);
      }
      return q + "\"";
    }
    return t;
  }
  return text::one_line(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                        kMaxValue);
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) {
    s.append(width - s.size(), ' ');
  }
  return s;
}

std::string pretty(const nlohmann::json& ev, bool color) {
  std::string line = pad(text::local_clock(str_field(ev, "ts")), 12) + "  ";
  line += pad(text::one_line(str_field(ev, "source"), 16), 8) + "  ";
  line += pad(text::one_line(str_field(ev, "kind"), 40), 14) + "  ";
  std::string decision = text::one_line(str_field(ev, "decision"), 16);
  std::string shown = pad(decision, 5);
  if (color && (decision == "deny" || decision == "allow")) {
    shown = (decision == "deny" ? "\033[31m" : "\033[32m") + shown + "\033[0m";
  }
  line += shown;
  auto add = [&](const std::string& key, const nlohmann::json& v) {
    // Human units for the launcher's measurements ("duration_ms": 1500 -> "duration=1.5s");
    // the raw numbers stay in --json.
    if (v.is_number_unsigned() || v.is_number_integer()) {
      auto n = v.get<int64_t>();
      bool ms = key.size() > 3 && key.compare(key.size() - 3, 3, "_ms") == 0;
      if (ms && n >= 0) {
        line += "  " + text::one_line(key.substr(0, key.size() - 3), 64) + "=" +
                text::duration(std::chrono::milliseconds(n));
        return;
      }
      line += "  " + text::one_line(key, 64) + "=";
      if (key == "peak_memory" && n > 0) {
        std::string sz = text::size(static_cast<uint64_t>(n));
        sz.erase(sz.find(' '), 1);  // "23MiB": fields are separated by spaces
        line += sz;
        return;
      }
      line += value_text(v);
      return;
    }
    line += "  " + text::one_line(key, 64) + "=" + value_text(v);
  };
  for (auto key : kPreferred) {
    auto it = ev.find(std::string(key));
    if (it != ev.end()) {
      add(std::string(key), *it);
    }
  }
  for (const auto& [key, v] : ev.items()) {
    if (line.size() > kMaxPretty) {
      break;
    }
    if (!in(kPreferred, key) && !in(kHidden, key)) {
      add(key, v);
    }
  }
  if (line.size() > kMaxPretty) {
    line.resize(kMaxPretty);
    line += " ...";
  }
  while (!line.empty() && line.back() == ' ') {
    line.pop_back();
  }
  return line;
}

// A refused read of another process's /proc entry (`ps aux` walking /proc/N/environ, top, pgrep):
// the kernel's own permission check on a probe, nothing cordon decided. Such records are grouped
// in the listing so they do not bury the refusals that matter; --json keeps every line. The key
// is the same probe by the same program: source, kind, path with the pids as "*", error, exe.
std::optional<std::string> benign_probe(const nlohmann::json& ev) {
  auto num = ev.find("errno");
  if (str_field(ev, "kind") != "fs.open" || str_field(ev, "decision") == "deny" ||
      num == ev.end() || !num->is_number_unsigned() ||
      (num->get<uint64_t>() != EACCES && num->get<uint64_t>() != EPERM)) {
    return std::nullopt;
  }
  std::string path = str_field(ev, "path");
  if (path.rfind("/proc/", 0) != 0) {
    return std::nullopt;
  }
  std::string pattern = "/proc/";
  size_t i = 6;
  size_t digits = path.find_first_not_of("0123456789", i);
  if (digits == i || digits == std::string::npos || path[digits] != '/') {
    return std::nullopt;  // not a process's directory
  }
  pattern += "*" + path.substr(digits);
  return str_field(ev, "source") + "\n" + pattern + "\n" + std::to_string(num->get<uint64_t>()) +
         "\n" + str_field(ev, "exe");
}

// Benign probes held back until the next other event (or the end), then shown as one line each.
class ProbeGroups {
 public:
  // False when `ev` is not a probe (the caller prints it, after flush()).
  bool add(const nlohmann::json& ev) {
    auto key = benign_probe(ev);
    if (!key) {
      return false;
    }
    for (auto& g : groups_) {
      if (g.key == *key) {
        ++g.count;
        return true;
      }
    }
    if (groups_.size() >= kMaxGroups) {
      return false;
    }
    groups_.push_back({*key, ev, 1});
    return true;
  }
  void flush(std::ostream& out, bool color) {
    for (const auto& g : groups_) {
      out << pretty(g.first, color);
      if (g.count > 1) {
        std::string path = str_field(g.first, "path");
        size_t rest = path.find('/', 6);
        out << "  (and " << g.count - 1 << " more like it: benign probes of /proc/*"
            << text::one_line(rest == std::string::npos ? "" : path.substr(rest), 80)
            << ", grouped; --json lists each)";
      }
      out << "\n";
    }
    groups_.clear();
  }

 private:
  static constexpr size_t kMaxGroups = 64;
  struct Group {
    std::string key;
    nlohmann::json first;
    uint64_t count;
  };
  std::vector<Group> groups_;
};

// One events.jsonl line as `cordon log` shows it: filtered, benign probes grouped, pretty or raw.
class LinePrinter {
 public:
  LinePrinter(const LogOptions& opts, std::ostream& out) : opts_(opts), out_(out) {}
  // Returns the event's kind ("" for a line that is not an event).
  std::string line(size_t number, std::string_view line, bool complete) {
    if (line.empty() && complete) {
      return {};  // an empty line is not an event
    }
    nlohmann::json ev;
    if (complete) {
      ev = store::parse_event(line);
    }
    if (!complete || ev.is_discarded() || !ev.is_object()) {
      if (opts_.filter.empty()) {
        probes_.flush(out_, opts_.color);
        out_ << "(unparseable line " << number << ")\n";
      }
      return {};
    }
    if (matches(opts_.filter, ev)) {
      if (opts_.json) {
        out_ << line << "\n";
      } else if (!probes_.add(ev)) {
        probes_.flush(out_, opts_.color);
        out_ << pretty(ev, opts_.color) << "\n";
      }
    }
    return str_field(ev, "kind");
  }
  void flush() {
    probes_.flush(out_, opts_.color);
    out_.flush();
  }

 private:
  const LogOptions& opts_;
  std::ostream& out_;
  ProbeGroups probes_;
};

Status copy_raw(int fd, std::ostream& out) {
  char chunk[65536];
  char last = '\n';
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return sys_error("read(events.jsonl)");
    }
    if (n == 0) {
      break;
    }
    out.write(chunk, n);
    last = chunk[n - 1];
  }
  if (last != '\n') {
    out << '\n';
  }
  out.flush();
  return {};
}

// --follow: the record as it grows, until session.end, or until nobody runs the session any more
// (cordon was killed: its record stops without an end).
bool still_running(const std::string& root, const std::string& id) {
  // A fresh open each time: read_session_state locks a directory nobody holds until it is closed.
  auto r = store::open_root(root);
  if (!r.ok()) {
    return false;
  }
  auto d = store::open_session_dir(r->get(), id);
  return d.ok() && read_session_state(d->get(), root + "/" + id, false).running;
}

int follow(const std::string& root, const std::string& id, int fd, const LogOptions& opts,
           std::ostream& out, std::ostream& err) {
  constexpr int kPollMs = 100;
  constexpr int kLivenessEvery = 5;  // polls between looks at whether the session still runs
  LinePrinter printer(opts, out);
  LineSplitter lines(store::kMaxLine);  // a line longer than any writer writes is cut
  size_t number = 0;
  char buf[64 << 10];
  bool stopped = false;  // the session no longer runs: read what is left, then end
  for (int quiet_polls = 0;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      say(err, "session " + id + ": read(events.jsonl): " + std::strerror(errno));
      return 1;
    }
    if (n > 0) {
      quiet_polls = 0;
      bool ended = false;
      lines.feed({buf, static_cast<size_t>(n)}, [&](std::string_view line, bool complete) {
        ended = printer.line(++number, line, complete) == "session.end" || ended;
      });
      if (ended) {
        printer.flush();
        return 0;
      }
      continue;
    }
    printer.flush();
    if (stopped) {
      say(err, "session " + id + " stopped without recording its end (cordon was killed?)");
      return 0;
    }
    if (++quiet_polls % kLivenessEvery == 0 && !still_running(root, id)) {
      stopped = true;  // one more read for what it wrote last
      continue;
    }
    ::poll(nullptr, 0, kPollMs);
  }
}

}  // namespace

int log_command(const std::string& root, const std::string& id, const LogOptions& opts,
                std::ostream& out, std::ostream& err) {
  auto resolved = resolve_session(root, id);
  if (!resolved.ok()) {
    say(err, resolved.error().to_string());
    return 1;
  }
  auto root_fd = store::open_root(root);
  if (!root_fd.ok()) {
    say(err, root_fd.error().to_string());
    return 1;
  }
  auto dir = store::open_session_dir(root_fd->get(), *resolved);
  if (!dir.ok()) {
    say(err, dir.error().to_string());
    return 1;
  }
  auto fd = store::open_file(dir->get(), "events.jsonl");
  if (!fd.ok()) {
    say(err, "session " + *resolved + ": " + fd.error().to_string());
    return 1;
  }
  if (opts.net && !opts.json) {
    out << net_report(collect_net_stats(fd->get()));
    out.flush();
    return 0;
  }
  if (opts.json && opts.filter.empty()) {
    // --json: the bytes as written, every line of any length, plus a newline after a torn tail.
    auto st = copy_raw(fd->get(), out);
    if (!st.ok()) {
      say(err, "session " + *resolved + ": " + st.error().to_string());
      return 1;
    }
    return 0;
  }
  if (opts.follow) {
    return follow(root, *resolved, fd->get(), opts, out, err);
  }
  LinePrinter printer(opts, out);
  auto st =
      store::for_each_line(fd->get(), 0, [&](size_t number, std::string_view line, bool complete) {
        printer.line(number, line, complete);
      });
  printer.flush();
  if (!st.ok()) {
    say(err, "session " + *resolved + ": " + st.error().to_string());
    return 1;
  }
  return 0;
}

int log_net_command(const std::string& id, bool json) {
  LogOptions opts;
  opts.json = json;
  opts.net = true;
  opts.filter.kind_prefixes = {"net.", "limit.hit"};
  return log_command(sessions_root(), id, opts, std::cout, std::cerr);
}

int log_command(const std::string& id, bool json, bool follow) {
  LogOptions opts;
  opts.json = json;
  opts.follow = follow;
  // https://no-color.org: any non-empty NO_COLOR disables colour.
  const char* no_color = std::getenv("NO_COLOR");
  opts.color = !json && ::isatty(STDOUT_FILENO) == 1 && (no_color == nullptr || *no_color == '\0');
  return log_command(sessions_root(), id, opts, std::cout, std::cerr);
}

}  // namespace cordon::launcher
