// The cow diff for the report, through the same layer walk and rename pairing as `cordon diff`.
#include "launcher/commands/report/files_view.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "fusefs/renames.h"
#include "fusefs/safe_io.h"
#include "fusefs/workflow.h"
#include "launcher/session/cow_session.h"
#include "launcher/session/session_text.h"
#include "launcher/session/unified_diff.h"

namespace cordon::launcher::report {
namespace {

using fusefs::Change;
using fusefs::ChangeKind;
using fusefs::DiffEntry;

// The text diff of a regular file's change, cut at `budget` bytes (which it lowers); null when
// there is none to show (a rename, another type, a binary file: "binary" is set instead).
nlohmann::json text_diff(const DiffEntry& e, int lower_fd, int upper_fd, size_t* budget,
                         bool* binary) {
  const Change& ch = e.change;
  if (!e.renamed_from.empty() || ch.type != 'f' ||
      (ch.kind == ChangeKind::Modified && ch.old_type != 'f') || *budget == 0) {
    return nullptr;
  }
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  auto sides = open_diff_sides(ch, lower_fd, upper_fd);
  if (!sides) {
    return "(cannot open: " + std::string(std::strerror(errno)) + ")";
  }
  const UniqueFd& of = sides->old_side;
  const UniqueFd& nf = sides->new_side;
  if (sides->binary) {
    *binary = true;
    return nullptr;
  }
  const size_t limit = std::min(*budget, kMaxDiffBytes);
  std::string out;
  bool cut = false;
  bool ok = unified_diff_lines(of ? of.get() : null.get(), nf ? nf.get() : null.get(),
                               [&](std::string_view line) {
                                 if (out.size() + line.size() + 1 > limit) {
                                   cut = true;
                                   return;
                                 }
                                 out += text::escaped(line, {.keep_tab = true});
                                 out += '\n';
                               });
  *budget -= std::min(*budget, out.size());
  if (cut) {
    out += "… (cut: `cordon diff ID PATH` shows all of it)\n";
  }
  if (!ok) {
    out += "(diff(1) failed or is missing)\n";
  }
  return out;
}

const char* kind_name(const DiffEntry& e) {
  return e.renamed_from.empty() ? fusefs::change_kind_name(e.change.kind) : "renamed";
}

}  // namespace

nlohmann::json files_view(const std::string& session_id) {
  nlohmann::json out = {{"available", false}, {"changes", nlohmann::json::array()}, {"more", 0}};
  bool refused = false;
  auto s = open_cow_session(session_id, &refused);
  if (!s.ok()) {
    out["note"] = refused ? "not a copy-on-write session: the program wrote the workspace itself"
                          : text::one_line(s.error().to_string(), 500);
    return out;
  }
  std::string note;
  policy::FilesystemPolicy pol = review_policy(*s, &note);
  // An imported session bound to no workspace is shown against nothing (cow_session.h).
  auto ws = open_session_workspace(*s);
  if (!ws.ok()) {
    out["note"] = text::one_line(ws.error().to_string(), 500);
    return out;
  }
  UniqueFd lower = std::move(*ws);
  auto changes = fusefs::diff_layers(lower.get(), s->lower, s->upper, &pol, s->format);
  UniqueFd upper(::open(s->upper.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!changes.ok() || !lower || !upper) {
    out["note"] = changes.ok() ? "the workspace or the session's layer cannot be opened"
                               : text::one_line(changes.error().to_string(), 500);
    return out;
  }
  out["available"] = true;
  out["workspace"] = text::one_line(
      s->workspace.empty() ? "none (imported; it ran on " + s->origin + ")" : s->workspace, 1000);
  if (s->workspace.empty()) {
    note =
        "imported without a workspace: every file of the layer shows as added, and its "
        "deletions are not listed (cordon diff lists them)";
  }
  out["running"] = s->running;
  if (!note.empty()) {
    out["note"] = text::one_line(note, 500);
  }
  std::vector<DiffEntry> entries = fusefs::pair_renames(*changes, lower.get(), upper.get());
  // Protected changes first, as `cordon diff` shows them: they would run code on the host.
  std::stable_partition(entries.begin(), entries.end(),
                        [](const DiffEntry& e) { return e.change.is_protected; });
  size_t budget = kMaxAllDiffBytes;
  for (const auto& e : entries) {
    if (out["changes"].size() >= kMaxChanges) {
      out["more"] = entries.size() - kMaxChanges;
      break;
    }
    const Change& ch = e.change;
    bool binary = false;
    nlohmann::json c = {{"kind", kind_name(e)},
                        {"path", text::one_line(ch.path, 1000)},
                        {"type", std::string(1, ch.type)},
                        {"size", ch.size},
                        {"old_size", ch.old_size},
                        {"mode", ch.mode},
                        {"old_mode", ch.old_mode},
                        {"protected", ch.is_protected},
                        {"rule", ch.protect_rule}};
    if (!e.renamed_from.empty()) {
      c["from"] = text::one_line(e.renamed_from, 1000);
    }
    c["diff"] = text_diff(e, lower.get(), upper.get(), &budget, &binary);
    c["binary"] = binary;
    out["changes"].push_back(std::move(c));
  }
  return out;
}

}  // namespace cordon::launcher::report
