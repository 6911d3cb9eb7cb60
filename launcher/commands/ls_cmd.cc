// `cordon ls`: one row per session, newest last. Reads only summary.json, or the head and the last
// line of events.jsonl for sessions that never wrote one (running, or crashed); its state, size
// and pending changes from session_state.h.
#include <array>
#include <cerrno>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "launcher/diagnostics.h"
#include "launcher/session/session.h"
#include "launcher/session/session_state.h"
#include "launcher/session/session_store.h"
#include "launcher/session/session_text.h"

namespace cordon::launcher {

namespace {

constexpr size_t kMaxSummary = 1u << 20;
constexpr size_t kHeadBytes = 64u << 10;  // session.start is among the first events
constexpr size_t kMaxLine = 64u << 10;    // EventLog's own line limit
constexpr size_t kCommandWidth = 40;
constexpr size_t kWorkspaceWidth = 60;

struct Row {
  std::string id, start, duration, exit, size, pending, command, workspace;
};

std::string quote_arg(const std::string& a) {
  // Quoted the way a shell would need it, so the column can be pasted back.
  if (!a.empty() && a.find_first_of(" \t'\"\\$`*?()[]{};&|<>!#~") == std::string::npos) {
    return a;
  }
  std::string q = "'";
  for (char c : a) {
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return q + "'";
}

std::string join_argv(const nlohmann::json& argv) {
  std::string out;
  if (!argv.is_array()) {
    return out;
  }
  for (const auto& a : argv) {
    if (!a.is_string()) {
      continue;
    }
    if (!out.empty()) {
      out += ' ';
    }
    out += quote_arg(a.get<std::string>());
    if (out.size() > kCommandWidth * 4) {
      break;  // truncated below anyway
    }
  }
  return out;
}

std::string str_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string fit(std::string_view s, size_t width) {
  std::string line = text::one_line(s, 4 * width);
  if (line.size() <= width) {
    return line;
  }
  return line.substr(0, width - 3) + "...";
}

// The EXIT column from a session.end event or summary.json (same fields).
std::string exit_text(const nlohmann::json& end) {
  std::string code = end.contains("exit_code") && end["exit_code"].is_number_integer()
                         ? std::to_string(end["exit_code"].get<int64_t>())
                         : "?";
  if (end.value("timed_out", false)) {
    return code + " timeout";
  }
  if (end.contains("limits_hit") && end["limits_hit"].is_array() && !end["limits_hit"].empty() &&
      end["limits_hit"][0].is_string()) {
    return code + " " + end["limits_hit"][0].get<std::string>();
  }
  if (!str_field(end, "error").empty()) {
    return code + " error";
  }
  std::string sig = str_field(end, "signal_name");
  return sig.empty() ? code : code + " " + sig;
}

void fill_from_end(Row& row, const nlohmann::json& end) {
  if (end.contains("duration_ms") && end["duration_ms"].is_number()) {
    row.duration = text::duration(std::chrono::milliseconds(end["duration_ms"].get<int64_t>()));
  }
  row.exit = exit_text(end);
}

Row read_row_fields(int root_fd, const std::string& root, const std::string& id) {
  Row row;
  row.id = id;
  row.start = text::local_datetime(store::session_id_time(id));
  row.duration = "-";
  auto dir = store::open_session_dir(root_fd, id);
  if (!dir.ok()) {
    row.exit = "unreadable";
    return row;
  }
  SessionState state = read_session_state(dir->get(), root + "/" + id, true);
  row.exit = state.running ? "running" : "no end";  // replaced by the recorded end, if any
  row.size = (state.bytes_more ? ">" : "") + text::size(state.bytes);
  row.pending = state.pending ? "yes" : "-";
  if (auto data = store::read_file(dir->get(), "summary.json", kMaxSummary); data.ok()) {
    auto j = store::parse_event(*data);
    if (j.is_object()) {
      fill_from_end(row, j);
      row.command = join_argv(j.value("argv", nlohmann::json()));
      row.workspace = str_field(j, "workspace");
      return row;
    }
  }
  // No (readable) summary: still running, or cordon died before writing it.
  auto events = store::open_file(dir->get(), "events.jsonl");
  if (!events.ok()) {
    return row;
  }
  std::istringstream head(store::read_head(events->get(), kHeadBytes));
  for (std::string line; std::getline(head, line);) {
    auto j = store::parse_event(line);
    if (j.is_object() && str_field(j, "kind") == "session.start") {
      row.command = join_argv(j.value("argv", nlohmann::json()));
      row.workspace = str_field(j, "workspace");
      break;
    }
  }
  auto last = store::parse_event(store::read_last_line(events->get(), kMaxLine));
  if (last.is_object() && str_field(last, "kind") == "session.end" &&
      str_field(last, "source") == "launcher") {
    fill_from_end(row, last);
  }
  return row;
}

// A --learn session (it keeps the policy it was asked for) says so before its command: its
// network was open to every public name.
Row read_row(int root_fd, const std::string& root, const std::string& id) {
  Row row = read_row_fields(root_fd, root, id);
  if (auto dir = store::open_session_dir(root_fd, id);
      dir.ok() && store::open_file(dir->get(), kRequestedPolicy).ok()) {
    row.command = "[learn] " + row.command;
  }
  return row;
}

struct Listing {
  UniqueFd root;  // not open when there is no sessions directory yet
  std::vector<std::string> ids;
};

// The sessions under `root`, oldest first; none when it does not exist yet. nullopt once the
// reason is on `err`.
std::optional<Listing> list(const std::string& root, std::ostream& err) {
  auto root_fd = store::open_root(root);
  if (!root_fd.ok()) {
    if (root_fd.error().code == ENOENT) {
      return Listing{};
    }
    say(err, root_fd.error().to_string());
    return std::nullopt;
  }
  auto ids = store::list_sessions(root_fd->get());
  if (!ids.ok()) {
    say(err, ids.error().to_string());
    return std::nullopt;
  }
  return Listing{std::move(*root_fd), std::move(*ids)};
}

}  // namespace

int ls_command(const std::string& root, std::ostream& out, std::ostream& err) {
  auto listing = list(root, err);
  if (!listing) {
    return 1;
  }
  const auto& [root_fd, ids] = *listing;
  if (ids.empty()) {
    out << "no sessions yet (" << root << ")\n";
    return 0;
  }
  std::vector<Row> rows;
  rows.push_back({"ID", "START", "DURATION", "EXIT", "SIZE", "PENDING", "COMMAND", "WORKSPACE"});
  for (const auto& id : ids) {
    Row r = read_row(root_fd.get(), root, id);
    r.command = fit(r.command, kCommandWidth);
    r.workspace = fit(r.workspace, kWorkspaceWidth);
    rows.push_back(std::move(r));
  }
  constexpr int kPadded = 7;  // every column but the last is padded to its widest cell
  size_t w[kPadded] = {};
  auto cells = [](const Row& r) {
    return std::array<const std::string*, kPadded + 1>{
        &r.id, &r.start, &r.duration, &r.exit, &r.size, &r.pending, &r.command, &r.workspace};
  };
  for (const auto& r : rows) {
    auto c = cells(r);
    for (int i = 0; i < kPadded; ++i) {
      w[i] = std::max(w[i], c[i]->size());
    }
  }
  for (const auto& r : rows) {
    auto c = cells(r);
    std::string line;
    for (int i = 0; i < kPadded; ++i) {
      line += *c[i];
      line.append(w[i] - c[i]->size() + 2, ' ');
    }
    line += *c[kPadded];
    while (!line.empty() && line.back() == ' ') {
      line.pop_back();
    }
    out << line << "\n";
  }
  return 0;
}

int ls_ids_command(const std::string& root, std::ostream& out, std::ostream& err) {
  auto listing = list(root, err);
  if (!listing) {
    return 1;
  }
  for (const auto& id : listing->ids) {
    out << id << "\n";
  }
  return 0;
}

int ls_command() { return ls_command(sessions_root(), std::cout, std::cerr); }
int ls_ids_command() { return ls_ids_command(sessions_root(), std::cout, std::cerr); }

}  // namespace cordon::launcher
