// Policy loading: JSON with comments -> a validated Policy, every error naming its field path.
#include "policy/loader.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"
#include "policy/otlp_url.h"
#include "policy/path_match.h"
#include "policy/presets.h"
#include "policy/serialize.h"

namespace cordon::policy {
namespace {

using json = nlohmann::json;

// A policy is a handful of sections a few levels deep; anything deeper is hostile or broken.
// nlohmann's parser is iterative, but dumping and destroying values is not everywhere, so refuse
// early rather than build a 100000-level tree.
constexpr int kMaxDepth = 64;
constexpr size_t kMaxFileBytes = 1 << 20;
constexpr int64_t kMaxDurationMs = 365ll * 24 * 3600 * 1000;

constexpr const char* kHostAccepted =
    "accepted: name, *.suffix, *, IP, CIDR, each optionally with :port or :lo-hi";
constexpr const char* kSizeAccepted =
    "accepted: a number of bytes, or \"512K\", \"64M\", \"1.5G\", \"2T\"";
constexpr const char* kDurationAccepted =
    "accepted: \"250ms\", \"90s\", \"30m\", \"2h\", \"1d\", \"1m30s\", or a number of seconds";

// Bytes of an arbitrary input shown in a message: printable ASCII as is, the rest escaped, so an
// error about hostile input cannot itself carry control characters or broken UTF-8.
std::string printable(std::string_view s, size_t max = 80) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// A JSON value as it appears in a message: strings quoted, long values cut at a UTF-8 boundary.
std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMax = 80;
  if (s.size() > kMax) {
    size_t cut = kMax;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) {
      --cut;
    }
    s = s.substr(0, cut) + "...";
  }
  return s;
}

std::string quote_str(std::string_view s) { return show(json(std::string(s))); }

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    prev[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      char ca = static_cast<char>(std::tolower(static_cast<unsigned char>(a[i - 1])));
      char cb = static_cast<char>(std::tolower(static_cast<unsigned char>(b[j - 1])));
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca == cb ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string join_path(const std::string& base, std::string_view key) {
  return base.empty() ? std::string(key) : base + "." + std::string(key);
}

std::string index_path(const std::string& base, size_t i) {
  return base + "[" + std::to_string(i) + "]";
}

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::null:
      return "null";
    default:
      return "a number";
  }
}

std::string resolve_home(const LoadOptions& opts) {
  if (!opts.home.empty()) {
    return opts.home;
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/') {
    return h;
  }
  // No usable $HOME (stripped environments, some service managers): ask the user database.
  struct passwd pw;
  struct passwd* res = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(::getuid(), &pw, buf.data(), buf.size(), &res) == 0 && res != nullptr &&
      res->pw_dir != nullptr && res->pw_dir[0] == '/') {
    return res->pw_dir;
  }
  return {};
}

// Parses the text with two checks nlohmann does not make itself: nesting depth, and duplicate
// keys (which it would silently resolve to the last one; in a security policy a key written twice
// is a mistake to point out, not to guess about).
class JsonReader {
 public:
  explicit JsonReader(const std::string& source) : source_(source) {}

  json parse(std::string_view text) {
    auto cb = [this](int depth, json::parse_event_t ev, json& parsed) -> bool {
      on_event(depth, ev, parsed);
      return true;
    };
    try {
      return json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true,
                         /*ignore_comments=*/true);
    } catch (const json::exception& e) {
      // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." -> from "line".
      std::string msg = e.what();
      size_t at = msg.find("at line");
      if (at != std::string::npos) {
        msg = msg.substr(at + 3);
      } else if (size_t br = msg.find("] "); br != std::string::npos) {
        msg = msg.substr(br + 2);
      }
      throw PolicyError(source_, "", "invalid JSON: " + printable(msg, 300));
    }
  }

 private:
  struct Frame {
    bool array = false;
    std::string key;   // object: the current key
    size_t index = 0;  // array: the current element
    std::set<std::string> seen;
  };

  std::string frame_path(size_t upto) const {
    std::string p;
    for (size_t i = 0; i < upto; ++i) {
      const Frame& f = frames_[i];
      p = f.array ? index_path(p, f.index) : join_path(p, printable(f.key, 60));
    }
    return p;
  }

  void on_event(int depth, json::parse_event_t ev, json& parsed) {
    using E = json::parse_event_t;
    if (depth > kMaxDepth) {
      throw PolicyError(source_, frame_path(frames_.size()),
                        "nested deeper than " + std::to_string(kMaxDepth) +
                            " levels; a policy is a few levels deep");
    }
    switch (ev) {
      case E::object_start:
      case E::array_start:
        frames_.push_back(Frame{ev == E::array_start, {}, 0, {}});
        break;
      case E::object_end:
      case E::array_end:
        if (!frames_.empty()) {
          frames_.pop_back();
        }
        element_done();
        break;
      case E::key: {
        if (frames_.empty() || !parsed.is_string()) {
          break;
        }
        Frame& f = frames_.back();
        std::string k = parsed.get<std::string>();
        if (!f.seen.insert(k).second) {
          throw PolicyError(source_, join_path(frame_path(frames_.size() - 1), printable(k, 60)),
                            "key " + quote_str(k) + " appears twice in the same object; keep one");
        }
        f.key = std::move(k);
        break;
      }
      case E::value:
        element_done();
        break;
    }
  }

  void element_done() {
    if (!frames_.empty() && frames_.back().array) {
      ++frames_.back().index;
    }
  }

  const std::string& source_;
  std::vector<Frame> frames_;
};

// Walks the parsed document section by section. Every accessor takes the field path it reports.
class Loader {
 public:
  Loader(const LoadOptions& opts, std::string home)
      : source_(opts.source_name), home_(std::move(home)), agent_(opts.agent) {}

  Policy load(const json& root) {
    Policy p;
    p.filesystem.protect = default_protected();
    p.filesystem.deny = default_denied(home_);
    if (!root.is_object()) {
      fail("", "a policy is a JSON object { ... }, got " + type_name(root));
    }
    check_keys(root, "",
               {"version", "extends", "network", "filesystem", "process", "record", "canaries"});
    if (const json* v = field(root, "version")) {
      if (!v->is_number_integer() || v->get<int64_t>() != 1) {
        fail("version", show(*v) + " is not a supported version (accepted: 1)");
      }
      p.version = 1;
    }
    if (const json* v = field(root, "network")) {
      load_network(*v, "network", p.network);
    }
    if (const json* v = field(root, "filesystem")) {
      load_filesystem(*v, "filesystem", p.filesystem);
    }
    if (const json* v = field(root, "process")) {
      load_process(*v, "process", p.process);
    }
    if (const json* v = field(root, "record")) {
      load_record(*v, "record", p.record);
    }
    if (const json* v = field(root, "canaries")) {
      p.canaries = get_canaries(*v);
    }
    load_extends(root, p);
    return p;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    throw PolicyError(source_, path, msg);
  }

  // "extends" (or LoadOptions::agent): the preset's additions on top of what the file says.
  void load_extends(const json& root, Policy& p) const {
    std::string name = agent_;
    if (const json* v = field(root, "extends")) {
      std::string in_file = get_string(*v, "extends", "an agent preset name such as \"codex\"");
      if (!name.empty() && in_file != name) {
        fail("extends", show(*v) + " differs from --agent " + quote_str(name) +
                            "; a policy extends one preset (drop --agent or change extends)");
      }
      name = in_file;
    }
    if (name.empty()) {
      return;
    }
    const Preset* preset = find_preset(name);
    if (preset == nullptr) {
      fail(agent_ == name ? "" : "extends",
           (agent_ == name ? "--agent: " : "") + unknown_preset(name));
    }
    apply_preset(p, *preset, home_, [&](std::string_view dotted) {
      const json* at = &root;
      size_t i = 0;
      while (at != nullptr && i <= dotted.size()) {
        size_t dot = std::min(dotted.find('.', i), dotted.size());
        std::string key(dotted.substr(i, dot - i));
        at = at->is_object() ? field(*at, key.c_str()) : nullptr;
        i = dot + 1;
      }
      return at != nullptr;
    });
  }

  static const json* field(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }

  void expect_object(const json& v, const std::string& path) const {
    if (!v.is_object()) {
      fail(path, "expected an object { ... }, got " + show(v));
    }
  }

  void expect_array(const json& v, const std::string& path, const char* of) const {
    if (!v.is_array()) {
      fail(path, std::string("expected an array of ") + of + " [ ... ], got " + show(v));
    }
  }

  void check_keys(const json& obj, const std::string& path,
                  std::initializer_list<std::string_view> allowed) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      const std::string& k = it.key();
      if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) {
        continue;
      }
      std::string_view best;
      size_t best_d = SIZE_MAX;
      for (std::string_view a : allowed) {
        // A key far longer than any schema key is no typo (and would make this quadratic).
        size_t d = k.size() > 64 ? SIZE_MAX - 1 : edit_distance(k, a);
        if (d < best_d) {
          best_d = d;
          best = a;
        }
      }
      std::string msg = "unknown key " + quote_str(k);
      // Up to half the key may differ ("denied" -> `deny`), as long as something is shared.
      if (best_d <= std::max<size_t>(2, (k.size() + 1) / 2) &&
          best_d < std::max(k.size(), best.size())) {
        msg += "; did you mean `" + std::string(best) + "`?";
      } else if (std::string home = section_of(k); !home.empty() && home != path) {
        // Right key, wrong place: {"allow": [...]} at the top instead of inside "network".
        msg += "; it belongs in `" + home + "` (`" + join_path(home, k) + "`)";
      }
      msg += " (accepted here:";
      for (std::string_view a : allowed) {
        msg += " " + std::string(a);
      }
      msg += ")";
      fail(join_path(path, printable(k, 60)), msg);
    }
  }

  // The section a schema key lives in, for keys written at the wrong level; "" if unknown or
  // top-level. "allow"/"deny" exist in several sections; network's is the usual mistake.
  static std::string section_of(std::string_view key) {
    static constexpr struct {
      std::string_view key, section;
    } kKeys[] = {
        {"allow", "network"},
        {"deny", "network"},
        {"max_connections", "network"},
        {"max_connections_per_host", "network"},
        {"connections_per_minute", "network"},
        {"max_bytes_out", "network"},
        {"max_bytes_in", "network"},
        {"idle_timeout", "network"},
        {"connect_timeout", "network"},
        {"resolve", "network"},
        {"dns", "network"},
        {"proxy_env", "network"},
        {"rules", "network"},
        {"inspect", "network"},
        {"inspect_exclude", "network"},
        {"ca", "network"},
        {"credentials", "network"},
        {"on_exfil", "network"},
        {"types", "network.dns"},
        {"workspace", "filesystem"},
        {"mode", "filesystem"},
        {"read", "filesystem"},
        {"write", "filesystem"},
        {"deny_write", "filesystem"},
        {"protect", "filesystem"},
        {"deny_style", "filesystem"},
        {"quota", "filesystem"},
        {"tmp", "filesystem"},
        {"xattrs", "filesystem"},
        {"bytes", "filesystem.quota"},
        {"inodes", "filesystem.quota"},
        {"memory", "process"},
        {"cpus", "process"},
        {"pids", "process"},
        {"nofile", "process"},
        {"fsize", "process"},
        {"timeout", "process"},
        {"kill_grace", "process"},
        {"env", "process"},
        {"exec_allow", "process"},
        {"seccomp", "process"},
        {"hostname", "process"},
        {"keep", "process.env"},
        {"set", "process.env"},
        {"max_bytes", "record"},
        {"events_per_second", "record"},
        {"events_to", "record"},
        {"otlp", "record"},
        {"pass", "process.env"},
        {"nested_sandbox", "process"},
        {"version", ""},
        {"extends", ""},
        {"network", ""},
        {"filesystem", ""},
        {"process", ""},
        {"record", ""},
    };
    for (const auto& k : kKeys) {
      if (k.key == key) {
        return std::string(k.section);
      }
    }
    return {};
  }

  std::string get_string(const json& v, const std::string& path, const char* what) const {
    if (!v.is_string()) {
      fail(path, std::string("expected ") + what + ", got " + show(v));
    }
    const std::string& s = v.get_ref<const std::string&>();
    if (s.find('\0') != std::string::npos) {
      fail(path, show(v) + " contains a NUL byte");
    }
    return s;
  }

  bool get_bool(const json& v, const std::string& path) const {
    if (!v.is_boolean()) {
      fail(path, "expected true or false, got " + show(v));
    }
    return v.get<bool>();
  }

  // A whole number in [lo, hi]; `zero_ok` additionally admits 0 (meaning "unlimited"/"none").
  uint64_t get_uint(const json& v, const std::string& path, uint64_t lo, uint64_t hi,
                    bool zero_ok) const {
    std::string accepted = "accepted: a whole number from " + std::to_string(lo) + " to " +
                           std::to_string(hi) + (zero_ok ? ", or 0 for unlimited" : "");
    uint64_t n = 0;
    if (v.is_number_unsigned()) {
      n = v.get<uint64_t>();
    } else if (v.is_number_integer()) {
      fail(path, show(v) + " is negative (" + accepted + ")");
    } else if (v.is_number_float()) {
      double d = v.get<double>();
      if (!(d >= 0 && d <= 1e15) || std::floor(d) != d) {
        fail(path, show(v) + " is not a whole number in range (" + accepted + ")");
      }
      n = static_cast<uint64_t>(d);
    } else {
      fail(path, "expected a whole number, got " + show(v) + " (" + accepted + ")");
    }
    if ((n == 0 && zero_ok) || (n >= lo && n <= hi)) {
      return n;
    }
    fail(path, show(v) + " is out of range (" + accepted + ")");
  }

  // Sizes in bytes: a JSON number or a string with a unit. `min` applies to non-zero values;
  // 0 ("0", "unlimited") is accepted when `zero_ok`.
  uint64_t get_size(const json& v, const std::string& path, bool zero_ok, uint64_t min = 1) const {
    uint64_t n = 0;
    std::string accepted =
        std::string(kSizeAccepted) + (zero_ok ? "; 0 or \"unlimited\" for no limit" : "");
    if (v.is_number_unsigned()) {
      n = v.get<uint64_t>();
    } else if (v.is_number_integer()) {
      fail(path, show(v) + " is negative; a size cannot be (" + accepted + ")");
    } else if (v.is_number_float()) {
      double d = v.get<double>();
      if (!(d >= 0 && d < 1.8e19) || std::floor(d) != d) {
        fail(path, show(v) + " is not a whole number of bytes (" + accepted + ")");
      }
      n = static_cast<uint64_t>(d);
    } else if (v.is_string()) {
      auto s = parse_size(v.get_ref<const std::string&>());
      if (!s) {
        fail(path, show(v) + " is not a size (" + accepted + ")");
      }
      n = *s;
    } else {
      fail(path, "expected a size like \"512M\", got " + show(v) + " (" + accepted + ")");
    }
    if (n == 0) {
      if (!zero_ok) {
        fail(path, show(v) + " is zero, which is not allowed here (" + accepted + ")");
      }
      return 0;
    }
    if (n < min) {
      fail(path, show(v) + " is too small; the least is " + format_size(min) +
                     (zero_ok ? " (or 0 for unlimited)" : ""));
    }
    return n;
  }

  Millis get_duration(const json& v, const std::string& path, bool zero_ok) const {
    std::string accepted = std::string(kDurationAccepted) + (zero_ok ? "; 0 for none" : "");
    Millis d{0};
    if (v.is_number()) {
      double s = v.get<double>();
      if (!(s >= 0) || s > static_cast<double>(kMaxDurationMs) / 1000) {
        fail(path, show(v) + " is not a duration in range (" + accepted + ", at most 365d)");
      }
      d = Millis(static_cast<int64_t>(std::llround(s * 1000)));
    } else if (v.is_string()) {
      auto p = parse_duration(v.get_ref<const std::string&>());
      if (!p) {
        fail(path, show(v) + " is not a duration (" + accepted + ")");
      }
      d = *p;
    } else {
      fail(path, "expected a duration like \"30s\", got " + show(v) + " (" + accepted + ")");
    }
    if (d.count() > kMaxDurationMs) {
      fail(path, show(v) + " is longer than the maximum of 365d");
    }
    if (d.count() == 0 && !zero_ok) {
      fail(path, show(v) + " is zero, which is not allowed here (" + accepted + ")");
    }
    return d;
  }

  std::vector<HostPattern> get_hosts(const json& v, const std::string& path) const {
    expect_array(v, path, "host patterns");
    std::vector<HostPattern> out;
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = index_path(path, i);
      std::string s = get_string(v[i], p, "a host pattern string");
      std::string why;
      auto hp = HostPattern::parse(s, &why);
      if (!hp) {
        fail(p, show(v[i]) + " is not a host pattern: " + why + " (" + kHostAccepted + ")");
      }
      out.push_back(std::move(*hp));
    }
    return out;
  }

  enum class PathKind { Any, HostPath };

  std::vector<PathPattern> get_paths(const json& v, const std::string& path, PathKind kind) const {
    expect_array(v, path, "paths");
    std::vector<PathPattern> out;
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = index_path(path, i);
      std::string s = get_string(v[i], p, "a path string");
      std::string why;
      auto pp = PathPattern::parse(s, home_, &why);
      if (!pp) {
        fail(p, show(v[i]) + " is not a path pattern: " + why +
                    " (accepted: \"/abs/path\", \"~/path\", \"rel/path\", with * ? ** globs)");
      }
      if (kind == PathKind::HostPath) {
        if (!pp->absolute) {
          fail(p, show(v[i]) +
                      " is relative; extra host paths are absolute or start with \"~/\" "
                      "(the workspace itself is always visible)");
        }
        if (pp->has_glob) {
          fail(p, show(v[i]) +
                      " has a glob; extra host paths are mounted one by one, so "
                      "name each path exactly");
        }
      }
      out.push_back(std::move(*pp));
    }
    return out;
  }

  void load_network(const json& v, const std::string& path, NetworkPolicy& n) const {
    expect_object(v, path);
    check_keys(
        v, path,
        {"allow", "deny", "max_connections", "max_connections_per_host", "connections_per_minute",
         "max_bytes_out", "max_bytes_in", "idle_timeout", "connect_timeout", "resolve", "dns",
         "proxy_env", "rules", "inspect", "inspect_exclude", "ca", "credentials", "on_exfil"});
    if (const json* f = field(v, "allow")) {
      n.allow = get_hosts(*f, join_path(path, "allow"));
      for (size_t i = 0; i < n.allow.size(); ++i) {
        const HostPattern& a = n.allow[i];
        // Inside the sandbox the loopback addresses are its own; an entry naming them is carried
        // to the host's loopback port by port, so "every port" would hand the program every
        // local service of the host (databases, agents' control ports) and take its own away.
        if (a.names_host_loopback() && a.port_lo <= 1 && a.port_hi == 65535) {
          fail(index_path(join_path(path, "allow"), i),
               show((*f)[i]) +
                   " names the host's loopback on every port; name the port of the service "
                   "the program may reach, e.g. \"localhost:11434\" (the sandbox's own loopback "
                   "stays its own on every other port)");
        }
      }
    }
    if (const json* f = field(v, "deny")) {
      n.deny = get_hosts(*f, join_path(path, "deny"));
    }
    if (const json* f = field(v, "max_connections")) {
      n.max_connections =
          static_cast<uint32_t>(get_uint(*f, join_path(path, "max_connections"), 0, 1000000, true));
    }
    if (const json* f = field(v, "max_connections_per_host")) {
      n.max_connections_per_host = static_cast<uint32_t>(
          get_uint(*f, join_path(path, "max_connections_per_host"), 1, 1000000, false));
    }
    if (const json* f = field(v, "connections_per_minute")) {
      n.connections_per_minute = static_cast<uint32_t>(
          get_uint(*f, join_path(path, "connections_per_minute"), 1, 100000000, false));
    }
    if (const json* f = field(v, "max_bytes_out")) {
      n.max_bytes_out = get_size(*f, join_path(path, "max_bytes_out"), true);
    }
    if (const json* f = field(v, "max_bytes_in")) {
      n.max_bytes_in = get_size(*f, join_path(path, "max_bytes_in"), true);
    }
    if (const json* f = field(v, "idle_timeout")) {
      n.idle_timeout = get_duration(*f, join_path(path, "idle_timeout"), true);
    }
    if (const json* f = field(v, "connect_timeout")) {
      n.connect_timeout = get_duration(*f, join_path(path, "connect_timeout"), false);
    }
    if (const json* f = field(v, "resolve")) {
      n.resolve = get_resolve(*f, join_path(path, "resolve"));
    }
    if (const json* f = field(v, "dns")) {
      std::string p = join_path(path, "dns");
      expect_object(*f, p);
      check_keys(*f, p, {"types"});
      if (const json* t = field(*f, "types")) {
        n.dns_types = get_dns_types(*t, join_path(p, "types"));
      }
    }
    if (const json* f = field(v, "proxy_env")) {
      n.proxy_env = get_bool(*f, join_path(path, "proxy_env"));
    }
    if (const json* f = field(v, "rules")) {
      n.rules = get_http_rules(*f, join_path(path, "rules"));
    }
    if (const json* f = field(v, "inspect")) {
      n.inspect = get_hosts(*f, join_path(path, "inspect"));
    }
    if (const json* f = field(v, "inspect_exclude")) {
      n.inspect_exclude = get_hosts(*f, join_path(path, "inspect_exclude"));
    }
    if (const json* f = field(v, "ca")) {
      std::string p = join_path(path, "ca");
      expect_object(*f, p);
      check_keys(*f, p, {"cert", "key"});
      for (auto [key, out] : {std::pair{"cert", &n.ca_cert}, std::pair{"key", &n.ca_key}}) {
        const json* x = field(*f, key);
        std::string kp = join_path(p, key);
        if (!x) {
          fail(p, std::string("missing \"") + key +
                      "\" (network.ca needs both the CA certificate and its key, PEM files)");
        }
        *out = get_string(*x, kp, "a PEM file path");
        if (out->empty() || out->size() > 4096 ||
            !(out->front() == '/' || out->starts_with("~/"))) {
          fail(kp, show(*x) + " is not a file path (accepted: \"/abs/ca.pem\", \"~/ca.pem\")");
        }
      }
    }
    if (const json* f = field(v, "credentials")) {
      n.credentials = get_credentials(*f, join_path(path, "credentials"), n);
    }
    if (const json* f = field(v, "on_exfil")) {
      const std::string p = join_path(path, "on_exfil");
      const std::string what = get_string(*f, p, "\"refuse\" or \"kill\"");
      if (what != "refuse" && what != "kill") {
        fail(p, show(*f) +
                    " is not an action (accepted: \"refuse\": a 403 and a net.exfil event; "
                    "\"kill\": the same, then the session ends)");
      }
      n.kill_on_exfil = what == "kill";
    }
  }

  // "canaries": true (all, the default), false (none) or a list of kCanaryNames.
  std::vector<std::string> get_canaries(const json& v) const {
    if (v.is_boolean()) {
      return v.get<bool>() ? default_canaries() : std::vector<std::string>{};
    }
    const std::string known = "\"aws\", \"ssh\", \"dotenv\", \"github\"";
    expect_array(v, "canaries", "canary names (\"aws\", \"ssh\", ...), true or false");
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string p = index_path("canaries", i);
      std::string name = get_string(v[i], p, "a canary name");
      if (std::find(std::begin(kCanaryNames), std::end(kCanaryNames), name) ==
          std::end(kCanaryNames)) {
        fail(p, show(v[i]) + " is not a canary (accepted: " + known + ")");
      }
      if (std::find(out.begin(), out.end(), name) != out.end()) {
        fail(p, show(v[i]) + " is named twice");
      }
      out.push_back(std::move(name));
    }
    return out;
  }

  // After allow and inspect_exclude: each credential host has to be reachable and inspected.
  std::vector<Credential> get_credentials(const json& v, const std::string& path,
                                          const NetworkPolicy& n) const {
    expect_array(v, path, "credentials {\"env\": \"NAME\", \"hosts\": [...]}");
    std::vector<Credential> out;
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = index_path(path, i);
      expect_object(v[i], p);
      check_keys(v[i], p, {"env", "hosts", "header", "plain_http", "file", "extract"});
      for (const char* later : {"file", "extract"}) {
        if (field(v[i], later)) {
          fail(join_path(p, later), std::string("\"") + later +
                                        "\" is not supported yet (use \"env\": the name of a "
                                        "variable in cordon's environment)");
        }
      }
      Credential c;
      const json* env = field(v[i], "env");
      if (!env) {
        fail(p, "missing \"env\" (the variable holding the secret, e.g. \"GITHUB_TOKEN\")");
      }
      c.env = get_string(*env, join_path(p, "env"), "a variable name");
      const bool name_ok = !c.env.empty() && c.env.size() <= 256 &&
                           !std::isdigit(static_cast<unsigned char>(c.env[0])) &&
                           std::all_of(c.env.begin(), c.env.end(), [](char ch) {
                             return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
                           });
      if (!name_ok) {
        fail(join_path(p, "env"), show(*env) + " is not a variable name (letters, digits, _)");
      }
      for (const auto& other : out) {
        if (other.env == c.env) {
          fail(join_path(p, "env"), show(*env) + " is named by an earlier credential already");
        }
      }
      const json* hosts = field(v[i], "hosts");
      std::string hp = join_path(p, "hosts");
      if (!hosts) {
        fail(p,
             "missing \"hosts\" (the hosts the secret may be sent to, e.g. [\"api.github.com\"])");
      }
      c.hosts = get_hosts(*hosts, hp);
      if (c.hosts.empty()) {
        fail(hp, "is empty: name the hosts the secret may be sent to");
      }
      for (size_t h = 0; h < c.hosts.size(); ++h) {
        const HostPattern& host = c.hosts[h];
        std::string at = index_path(hp, h);
        if (host.kind != HostPattern::Kind::Exact) {
          fail(at,
               "\"" + host.text + "\" is not an exact host name (a credential names each host)");
        }
        const bool allowed = std::any_of(n.allow.begin(), n.allow.end(), [&](const HostPattern& a) {
          const uint16_t lo = std::max(a.port_lo, host.port_lo);
          return lo <= std::min(a.port_hi, host.port_hi) && a.matches_name(host.name, lo);
        });
        if (!allowed) {
          fail(at, "\"" + host.text + "\" is not allowed by network.allow (add it there too)");
        }
        if (std::any_of(
                n.inspect_exclude.begin(), n.inspect_exclude.end(),
                [&](const HostPattern& x) { return x.matches_name(host.name, host.port_lo); })) {
          fail(at, "\"" + host.text +
                       "\" is in network.inspect_exclude, so its requests could not carry the "
                       "secret (remove it from one of the two)");
        }
      }
      if (const json* plain = field(v[i], "plain_http")) {
        c.plain_http = get_bool(*plain, join_path(p, "plain_http"));
      }
      if (const json* header = field(v[i], "header")) {
        std::string hdp = join_path(p, "header");
        c.header = get_string(*header, hdp, "a header line with {}");
        const size_t colon = c.header.find(':');
        const bool ok =
            colon != std::string::npos && colon > 0 && c.header.find("{}") != std::string::npos &&
            c.header.size() <= 4096 &&
            std::none_of(c.header.begin(), c.header.end(),
                         [](char ch) { return ch == '\r' || ch == '\n' || ch == '\0'; }) &&
            std::all_of(c.header.begin(), c.header.begin() + colon, [](char ch) {
              return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_';
            });
        if (!ok) {
          fail(hdp, show(*header) +
                        " is not a header line with {} for the secret (e.g. \"Authorization: "
                        "Bearer {}\")");
        }
      }
      out.push_back(std::move(c));
    }
    return out;
  }

  std::vector<HttpRule> get_http_rules(const json& v, const std::string& path) const {
    expect_array(v, path, "L7 rules {\"host\": ..., \"action\": \"allow\"|\"deny\"}");
    if (v.size() > 4096) {
      fail(path, "expected at most 4096 rules, got " + std::to_string(v.size()));
    }
    std::vector<HttpRule> out;
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = index_path(path, i);
      expect_object(v[i], p);
      check_keys(v[i], p, {"host", "methods", "paths", "action"});
      HttpRule r;
      const json* host = field(v[i], "host");
      if (!host) {
        fail(p, "missing \"host\" (the host pattern the rule is about, e.g. \"api.github.com\")");
      }
      std::string hp = join_path(p, "host");
      std::string hs = get_string(*host, hp, "a host pattern string");
      std::string why;
      auto pat = HostPattern::parse(hs, &why);
      if (!pat) {
        fail(hp, show(*host) + " is not a host pattern: " + why + " (" + kHostAccepted + ")");
      }
      r.host = std::move(*pat);
      if (const json* m = field(v[i], "methods")) {
        std::string mp = join_path(p, "methods");
        expect_array(*m, mp, "HTTP methods such as \"GET\"");
        for (size_t j = 0; j < m->size(); ++j) {
          std::string ep = index_path(mp, j);
          std::string s = get_string((*m)[j], ep, "an HTTP method such as \"GET\"");
          bool token = !s.empty() && s.size() <= 32;
          for (char& c : s) {
            token = token && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
                              c == '*');
            c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
          }
          if (!token) {
            fail(ep, show((*m)[j]) +
                         " is not an HTTP method (accepted: \"GET\", \"POST\", ..., or \"*\")");
          }
          r.methods.push_back(std::move(s));
        }
      }
      if (const json* ps = field(v[i], "paths")) {
        std::string pp = join_path(p, "paths");
        expect_array(*ps, pp, "path patterns such as \"/repos/*/*/issues/**\"");
        for (size_t j = 0; j < ps->size(); ++j) {
          std::string ep = index_path(pp, j);
          std::string s = get_string((*ps)[j], ep, "a path pattern such as \"/repos/**\"");
          if (std::string bad = http_path_pattern_problem(s); !bad.empty()) {
            fail(ep, show((*ps)[j]) + " is not a request path pattern: " + bad +
                         " (accepted: \"/exact/path\", \"/repos/*/issues\", \"/v1/**\"; "
                         "matched against the decoded, normalised path)");
          }
          r.paths.push_back(std::move(s));
        }
      }
      const json* action = field(v[i], "action");
      if (!action) {
        fail(p, "missing \"action\" (\"allow\" or \"deny\")");
      }
      std::string ap = join_path(p, "action");
      std::string a = get_string(*action, ap, "\"allow\" or \"deny\"");
      if (a != "allow" && a != "deny") {
        fail(ap, show(*action) + " is not an action (accepted: \"allow\", \"deny\")");
      }
      r.allow = a == "allow";
      out.push_back(std::move(r));
    }
    return out;
  }

  // Why `s` cannot be a network.rules path pattern ("" if it can): it must look like the
  // normalised paths it is matched against.
  static std::string http_path_pattern_problem(std::string_view s) {
    if (s.empty() || s[0] != '/') {
      return "it does not start with \"/\"";
    }
    if (s.size() > 1024) {
      return "it is longer than 1024 bytes";
    }
    for (char c : s) {
      if (c == '%' || c == ';' || c == '?' || c == '#' || c == '\\' ||
          static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        return "it contains '" + printable(std::string(1, c), 4) +
               "' (write the decoded path; queries, \";params\" and escapes are not matched)";
      }
    }
    policy::SegmentCursor cur(s);
    for (; !cur.done(); cur.next()) {
      if (cur.peek() == "..") {
        return "it contains a \"..\" segment";
      }
    }
    return {};
  }

  std::map<std::string, std::vector<IpAddress>> get_resolve(const json& v,
                                                            const std::string& path) const {
    expect_object(v, path);
    std::map<std::string, std::vector<IpAddress>> out;
    for (auto it = v.begin(); it != v.end(); ++it) {
      std::string kp = path + "[" + quote_str(it.key()) + "]";
      std::string name = normalize_host(it.key());
      if (name.empty() || IpAddress::parse(name)) {
        fail(kp, quote_str(it.key()) +
                     " is not a host name (accepted: a DNS name such as "
                     "\"api.test\" mapped to \"127.0.0.1\" or a list of addresses)");
      }
      std::vector<IpAddress> ips;
      auto add = [&](const json& e, const std::string& ep) {
        std::string s = get_string(e, ep, "an IP address string");
        auto ip = IpAddress::parse(s);
        if (!ip) {
          fail(ep, show(e) + " is not an IP address (accepted: \"127.0.0.1\", \"::1\")");
        }
        ips.push_back(*ip);
      };
      if (it->is_array()) {
        if (it->empty() || it->size() > 64) {
          fail(kp, "expected 1 to 64 addresses, got " + std::to_string(it->size()));
        }
        for (size_t i = 0; i < it->size(); ++i) {
          add((*it)[i], index_path(kp, i));
        }
      } else {
        add(*it, kp);
      }
      if (!out.emplace(name, std::move(ips)).second) {
        fail(kp, quote_str(it.key()) + " names " + quote_str(name) + " a second time");
      }
    }
    return out;
  }

  std::vector<std::string> get_dns_types(const json& v, const std::string& path) const {
    static constexpr std::string_view kKnown[] = {
        "A",   "AAAA",  "CNAME", "TXT",   "MX", "SRV",    "NS",   "PTR", "SOA",
        "CAA", "HTTPS", "SVCB",  "NAPTR", "DS", "DNSKEY", "TLSA", "ANY", "NULL"};
    expect_array(v, path, "DNS record types");
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = index_path(path, i);
      std::string s = get_string(v[i], p, "a record type such as \"A\"");
      std::string up = s;
      for (char& c : up) {
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      }
      if (std::find(std::begin(kKnown), std::end(kKnown), up) == std::end(kKnown)) {
        std::string accepted;
        for (auto k : kKnown) {
          accepted += (accepted.empty() ? "" : " ") + std::string(k);
        }
        fail(p, show(v[i]) + " is not a DNS record type (accepted: " + accepted + ")");
      }
      if (std::find(out.begin(), out.end(), up) == out.end()) {
        out.push_back(up);
      }
    }
    return out;
  }

  void load_filesystem(const json& v, const std::string& path, FilesystemPolicy& f) const {
    expect_object(v, path);
    check_keys(v, path,
               {"workspace", "mode", "read", "write", "deny", "deny_write", "protect", "deny_style",
                "quota", "tmp", "xattrs"});
    if (const json* x = field(v, "workspace")) {
      std::string p = join_path(path, "workspace");
      std::string s = get_string(*x, p, "a directory path");
      if (s.empty() || s.size() > 4096) {
        fail(p, show(*x) + " is not a directory path (accepted: \".\", \"~/project\", \"/abs\")");
      }
      if (s[0] == '~' && s.size() > 1 && s[1] != '/') {
        fail(p,
             show(*x) + ": \"~user\" paths are not supported; write \"~/...\" or an absolute path");
      }
      f.workspace = s;
    }
    if (const json* x = field(v, "mode")) {
      std::string p = join_path(path, "mode");
      std::string s = get_string(*x, p, "\"cow\", \"ro\" or \"rw\"");
      if (s == "cow") {
        f.mode = WorkspaceMode::Cow;
      } else if (s == "ro") {
        f.mode = WorkspaceMode::Ro;
      } else if (s == "rw") {
        f.mode = WorkspaceMode::Rw;
      } else {
        fail(p, show(*x) +
                    " is not a workspace mode (accepted: \"cow\" copy-on-write, \"ro\" "
                    "read-only, \"rw\" read-write)");
      }
    }
    if (const json* x = field(v, "read")) {
      f.read = get_paths(*x, join_path(path, "read"), PathKind::HostPath);
    }
    if (const json* x = field(v, "write")) {
      f.write = get_paths(*x, join_path(path, "write"), PathKind::HostPath);
    }
    if (const json* x = field(v, "deny")) {
      f.deny = get_paths(*x, join_path(path, "deny"), PathKind::Any);
    }
    if (const json* x = field(v, "deny_write")) {
      f.deny_write = get_paths(*x, join_path(path, "deny_write"), PathKind::Any);
    }
    if (const json* x = field(v, "protect")) {
      f.protect = get_paths(*x, join_path(path, "protect"), PathKind::Any);
    }
    if (const json* x = field(v, "deny_style")) {
      std::string p = join_path(path, "deny_style");
      std::string s = get_string(*x, p, "\"eacces\" or \"hide\"");
      if (s == "eacces") {
        f.deny_style = DenyStyle::Eacces;
      } else if (s == "hide") {
        f.deny_style = DenyStyle::Hide;
      } else {
        fail(p, show(*x) + " is not a deny style (accepted: \"eacces\", \"hide\")");
      }
    }
    if (const json* x = field(v, "quota")) {
      std::string p = join_path(path, "quota");
      expect_object(*x, p);
      check_keys(*x, p, {"bytes", "inodes"});
      if (const json* b = field(*x, "bytes")) {
        f.quota.bytes = get_size(*b, join_path(p, "bytes"), true);
      }
      if (const json* n = field(*x, "inodes")) {
        f.quota.inodes = get_uint(*n, join_path(p, "inodes"), 1, 1000000000000ull, true);
      }
    }
    if (const json* x = field(v, "tmp")) {
      // Below 1M most tools cannot even create their temp files; 0 leaves tmpfs unbounded (its
      // pages still count against process.memory).
      f.tmp = get_size(*x, join_path(path, "tmp"), true, 1ull << 20);
    }
    if (const json* x = field(v, "xattrs")) {
      f.xattrs = get_bool(*x, join_path(path, "xattrs"));
    }
  }

  void load_record(const json& v, const std::string& path, RecordPolicy& r) const {
    expect_object(v, path);
    check_keys(v, path, {"max_bytes", "events_per_second", "events_to", "otlp"});
    if (const json* f = field(v, "max_bytes")) {
      // No "unlimited": an unbounded record is the disk-filling attack this field exists for.
      r.max_bytes = get_size(*f, join_path(path, "max_bytes"), false, kMinRecordBytes);
    }
    if (const json* f = field(v, "events_per_second")) {
      r.events_per_second = static_cast<uint32_t>(
          get_uint(*f, join_path(path, "events_per_second"), 1, 1000000, true));
    }
    if (const json* f = field(v, "events_to")) {
      std::string p = join_path(path, "events_to");
      r.events_to = get_string(*f, p, "\"stdout\", \"stderr\", a file descriptor number or a path");
      if (r.events_to.empty() || r.events_to.find('\0') != std::string::npos) {
        fail(p, show(*f) +
                    " is not a sink; use \"stderr\", a file descriptor number (\"3\") or "
                    "a path");
      }
    }
    if (const json* f = field(v, "otlp")) {
      std::string p = join_path(path, "otlp");
      r.otlp = get_string(*f, p, "an http:// or https:// URL of an OTLP/HTTP collector");
      if (auto u = parse_otlp_url(r.otlp); !u.ok()) {
        fail(p, u.error().to_string());
      }
    }
  }

  void load_process(const json& v, const std::string& path, ProcessPolicy& pr) const {
    expect_object(v, path);
    check_keys(v, path,
               {"memory", "cpus", "pids", "nofile", "fsize", "timeout", "kill_grace", "env",
                "exec_allow", "seccomp", "nested_sandbox", "hostname"});
    if (const json* x = field(v, "memory")) {
      // A limit under 1M would kill the program before its loader finishes: surely a unit typo.
      pr.memory = get_size(*x, join_path(path, "memory"), true, 1ull << 20);
    }
    if (const json* x = field(v, "cpus")) {
      std::string p = join_path(path, "cpus");
      if (!x->is_number()) {
        fail(p, "expected a number of CPUs like 1 or 0.5, got " + show(*x));
      }
      double c = x->get<double>();
      // Below 0.01 the CFS quota (1ms per 100ms period) cannot express it.
      if (!(c == 0 || (c >= 0.01 && c <= 1024))) {
        fail(p, show(*x) +
                    " is out of range (accepted: 0.01 to 1024 cores, or 0 for "
                    "unlimited)");
      }
      pr.cpus = c;
    }
    if (const json* x = field(v, "pids")) {
      pr.pids = static_cast<uint32_t>(get_uint(*x, join_path(path, "pids"), 1, 4194304, true));
    }
    if (const json* x = field(v, "nofile")) {
      pr.nofile =
          static_cast<uint32_t>(get_uint(*x, join_path(path, "nofile"), 16, 1048576, false));
    }
    if (const json* x = field(v, "fsize")) {
      pr.fsize = get_size(*x, join_path(path, "fsize"), true);
    }
    if (const json* x = field(v, "timeout")) {
      pr.timeout = get_duration(*x, join_path(path, "timeout"), true);
    }
    if (const json* x = field(v, "kill_grace")) {
      pr.kill_grace = get_duration(*x, join_path(path, "kill_grace"), true);
    }
    if (const json* x = field(v, "env")) {
      load_env(*x, join_path(path, "env"), pr.env);
    }
    if (const json* x = field(v, "exec_allow")) {
      pr.exec_allow = get_paths(*x, join_path(path, "exec_allow"), PathKind::Any);
    }
    if (const json* x = field(v, "seccomp")) {
      std::string p = join_path(path, "seccomp");
      expect_object(*x, p);
      check_keys(*x, p, {"allow", "deny"});
      if (const json* a = field(*x, "allow")) {
        pr.seccomp.allow = get_syscalls(*a, join_path(p, "allow"));
      }
      if (const json* d = field(*x, "deny")) {
        pr.seccomp.deny = get_syscalls(*d, join_path(p, "deny"));
      }
      check_seccomp_lists(pr.seccomp);
    }
    if (const json* x = field(v, "nested_sandbox")) {
      pr.nested_sandbox = get_bool(*x, join_path(path, "nested_sandbox"));
    }
    if (pr.nested_sandbox && !pr.exec_allow.empty()) {
      fail(join_path(path, "nested_sandbox"),
           "true cannot be combined with process.exec_allow: exec_allow is enforced by Landlock, "
           "which forbids the mounts a nested sandbox needs (drop one of the two)");
    }
    if (const json* x = field(v, "hostname")) {
      std::string p = join_path(path, "hostname");
      std::string s = get_string(*x, p, "a host name");
      if (!valid_hostname(s)) {
        fail(p, show(*x) +
                    " is not a valid hostname (accepted: 1-64 characters of letters, "
                    "digits, '-' and '.', labels not starting or ending with '-')");
      }
      pr.hostname = s;
    }
  }

  static bool valid_hostname(std::string_view s) {
    if (s.empty() || s.size() > 64 || s.front() == '.' || s.back() == '.') {
      return false;
    }
    char prev = '.';
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      char next = i + 1 < s.size() ? s[i + 1] : '.';
      bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      if (c == '.') {
        if (prev == '.') {
          return false;
        }
      } else if (c == '-') {
        if (prev == '.' || next == '.') {
          return false;
        }
      } else if (!alnum) {
        return false;
      }
      prev = c;
    }
    return true;
  }

  static bool valid_env_name(std::string_view s, bool glob) {
    if (s.empty() || s.size() > 256) {
      return false;
    }
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
                (i > 0 && c >= '0' && c <= '9') || (glob && (c == '*' || (c >= '0' && c <= '9')));
      if (!ok) {
        return false;
      }
    }
    return true;
  }

  // A list of variable names (no globs); `unique` drops repeats.
  std::vector<std::string> get_env_names(const json& v, const std::string& path, const char* hint,
                                         bool unique) const {
    expect_array(v, path, "variable names");
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
      std::string ip = index_path(path, i);
      std::string s = get_string(v[i], ip, "a variable name");
      if (!valid_env_name(s, false)) {
        fail(ip, show(v[i]) +
                     " is not a variable name (accepted: letters, digits and '_', not starting "
                     "with a digit" +
                     hint + ")");
      }
      if (!unique || std::find(out.begin(), out.end(), s) == out.end()) {
        out.push_back(s);
      }
    }
    return out;
  }

  void load_env(const json& v, const std::string& path, EnvPolicy& e) const {
    expect_object(v, path);
    check_keys(v, path, {"keep", "set", "deny", "pass"});
    if (const json* x = field(v, "keep")) {
      e.keep = get_env_names(*x, join_path(path, "keep"), "", false);
    }
    if (const json* x = field(v, "pass")) {
      e.pass =
          get_env_names(*x, join_path(path, "pass"), "; no globs: each credential is named", true);
    }
    if (const json* x = field(v, "set")) {
      std::string p = join_path(path, "set");
      expect_object(*x, p);
      e.set.clear();
      for (auto it = x->begin(); it != x->end(); ++it) {
        std::string kp = join_path(p, printable(it.key(), 60));
        if (!valid_env_name(it.key(), false)) {
          fail(kp, quote_str(it.key()) +
                       " is not a variable name (accepted: letters, digits and "
                       "'_', not starting with a digit)");
        }
        e.set[it.key()] = get_string(*it, kp, "a string value");
      }
    }
    if (const json* x = field(v, "deny")) {
      std::string p = join_path(path, "deny");
      expect_array(*x, p, "variable name globs");
      e.deny.clear();
      for (size_t i = 0; i < x->size(); ++i) {
        std::string ip = index_path(p, i);
        std::string s = get_string((*x)[i], ip, "a variable name glob");
        if (!valid_env_name(s, true)) {
          fail(ip, show((*x)[i]) +
                       " is not a variable name glob (accepted: letters, digits, '_' "
                       "and '*', e.g. \"*TOKEN*\")");
        }
        e.deny.push_back(s);
      }
    }
  }

  void check_seccomp_lists(const SeccompPolicy& s) const {
    if (auto bad = s.invalid_entry()) {
      fail(bad->first, bad->second);
    }
  }

  std::vector<std::string> get_syscalls(const json& v, const std::string& path) const {
    expect_array(v, path, "syscall names");
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = index_path(path, i);
      std::string s = get_string(v[i], p, "a syscall name");
      bool ok = !s.empty() && s.size() <= 64;
      for (char c : s) {
        ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
      }
      if (!ok) {
        fail(p, show(v[i]) +
                    " is not a syscall name (accepted: lowercase letters, digits and "
                    "'_', e.g. \"ptrace\")");
      }
      out.push_back(s);
    }
    return out;
  }

  const std::string& source_;
  std::string home_;
  std::string agent_;
};

}  // namespace

Policy parse_policy(std::string_view text, const LoadOptions& opts) {
  JsonReader reader(opts.source_name);
  json root = reader.parse(text);
  return Loader(opts, resolve_home(opts)).load(root);
}

std::optional<std::pair<std::string, std::string>> SeccompPolicy::invalid_entry() const {
  for (size_t i = 0; i < allow.size(); ++i) {
    const std::string& n = allow[i];
    if (n == "unshare" || n == "clone" || n == "clone3") {
      return std::pair{index_path("process.seccomp.allow", i),
                       quote_str(n) +
                           " cannot be allowed: its filter is what stops the program from "
                           "creating user namespaces (to run the program's own bubblewrap "
                           "sandbox inside cordon, set process.nested_sandbox: true instead)"};
    }
  }
  for (size_t i = 0; i < deny.size(); ++i) {
    const std::string& n = deny[i];
    if (n == "execve" || n == "exit" || n == "exit_group" || n == "rt_sigreturn") {
      return std::pair{index_path("process.seccomp.deny", i),
                       quote_str(n) +
                           " cannot be denied: cordon and every program need it (to restrict "
                           "what may run, use process.exec_allow)"};
    }
  }
  return std::nullopt;
}

void apply_override(Policy& p, const Override& o, const LoadOptions& opts) {
  json doc = to_json(p);
  json* node = &doc;
  std::string_view rest = o.field;
  while (!rest.empty()) {
    size_t dot = rest.find('.');
    std::string key(rest.substr(0, dot));
    const bool last = dot == std::string_view::npos;
    // A list or map left at its default may be missing from to_json (network.inspect): the last
    // key is made, and the loader below still refuses a name the schema does not have.
    if (!node->is_object() || (!node->contains(key) && !last)) {
      throw PolicyError(o.flag, "", "no policy field " + o.field + " (a bug in cordon)");
    }
    if (!node->contains(key)) {
      (*node)[key] = o.how == Override::How::Merge ? json::object() : json::array();
    }
    node = &(*node)[key];
    rest = last ? std::string_view() : rest.substr(dot + 1);
  }
  switch (o.how) {
    case Override::How::Set:
      *node = o.value;
      break;
    case Override::How::Append:
      node->push_back(o.value);
      break;
    case Override::How::Merge:
      for (auto it = o.value.begin(); it != o.value.end(); ++it) {
        (*node)[it.key()] = it.value();
      }
      break;
  }
  LoadOptions lo = opts;
  lo.source_name = o.flag;
  p = Loader(lo, resolve_home(lo)).load(doc);
}

void widen_home_rules(Policy& p, const std::vector<std::string>& homes) {
  for (const auto& [field, rules] : {std::pair{"filesystem.deny", &p.filesystem.deny},
                                     std::pair{"filesystem.deny_write", &p.filesystem.deny_write},
                                     std::pair{"filesystem.protect", &p.filesystem.protect}}) {
    const size_t given = rules->size();
    for (const std::string& home : homes) {
      for (size_t i = 0; i < given; ++i) {
        const PathPattern r = (*rules)[i];
        if (r.text.empty() || r.text[0] != '~') {
          continue;
        }
        std::string why;
        auto other = PathPattern::parse(r.text, home, &why);
        if (!other) {
          throw PolicyError(index_path(field, i),
                            quote_str(r.text) + " under the home " + quote_str(home) + ": " + why);
        }
        // Written out as the path it names: policy.json must re-read the same under any home.
        other->text = other->expanded;
        if (std::none_of(rules->begin(), rules->end(),
                         [&](const PathPattern& q) { return q.expanded == other->expanded; })) {
          rules->push_back(std::move(*other));
        }
      }
    }
  }
}

Policy load_policy_file(const std::string& path, const LoadOptions& opts) {
  LoadOptions o = opts;
  if (o.source_name == LoadOptions{}.source_name) {
    o.source_name = path;
  }
  auto io_fail = [&](const std::string& what, int err, const std::string& hint) {
    std::string msg = what;
    if (err != 0) {
      msg += std::string(": ") + std::strerror(err);
    }
    if (!hint.empty()) {
      msg += " (" + hint + ")";
    }
    throw PolicyError(o.source_name, "", msg);
  };
  // O_NONBLOCK: opening a FIFO someone planted must not hang the launcher.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) {
    int e = errno;
    io_fail("cannot open the policy file", e,
            e == ENOENT
                ? "check the path; `cordon policy default > policy.json` writes a starting point"
            : e == EACCES ? "the file is not readable by this user"
                          : "");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    io_fail("fstat failed", errno, "");
  }
  if (S_ISDIR(st.st_mode)) {
    io_fail("is a directory, not a policy file", 0, "pass the JSON file inside it");
  }
  if (!S_ISREG(st.st_mode)) {
    io_fail("is not a regular file", 0, "pass a JSON file");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    io_fail("is " + std::to_string(st.st_size) + " bytes; a policy file is at most 1 MiB", 0, "");
  }
  std::string text;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      io_fail("cannot read the policy file", errno, "");
    }
    if (n == 0) {
      break;
    }
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxFileBytes) {
      io_fail("grew beyond 1 MiB while being read", 0, "");
    }
  }
  return parse_policy(text, o);
}

}  // namespace cordon::policy
