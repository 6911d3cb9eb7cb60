// `cordon diff ID [--stat] [PATH...]`: what a cow session would change in the workspace, told so
// that it cannot lie. The counts come first, protected changes on top; modes and setuid/setgid/
// sticky bits are shown; every name, link target and diff line goes through text::escaped, so a
// file name cannot clear the screen and draw a harmless diff over the real one.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fusefs/renames.h"
#include "fusefs/review_warnings.h"
#include "fusefs/safe_io.h"
#include "fusefs/workflow.h"
#include "launcher/commands.h"
#include "launcher/diagnostics.h"
#include "launcher/session/cow_session.h"
#include "launcher/session/session_text.h"
#include "launcher/session/unified_diff.h"

namespace cordon::launcher {
namespace {

using fusefs::Change;
using fusefs::ChangeKind;
using fusefs::DiffEntry;

struct Colors {
  const char* add = "";
  const char* del = "";
  const char* hunk = "";
  const char* head = "";
  const char* warn = "";
  const char* off = "";
};

Colors colors_for_stdout() {
  const char* no = std::getenv("NO_COLOR");
  if (::isatty(1) != 1 || (no != nullptr && *no != '\0')) {
    return {};
  }
  return {"\033[32m", "\033[31m", "\033[36m", "\033[1m", "\033[33m", "\033[0m"};
}

bool selected(const std::string& path, const std::vector<std::string>& only) {
  if (only.empty()) {
    return true;
  }
  for (std::string o : only) {
    while (o.size() > 1 && o.back() == '/') {
      o.pop_back();
    }
    if (o.rfind("./", 0) == 0) {
      o = o.substr(2);
    }
    if (o == "." || path == o || path.rfind(o + "/", 0) == 0) {
      return true;
    }
  }
  return false;
}

off_t size_of(int fd) {
  struct stat st {};
  return fd >= 0 && ::fstat(fd, &st) == 0 ? st.st_size : 0;
}

std::string octal(uint32_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

std::string target_of(int upper_fd, const std::string& path) {
  size_t slash = path.rfind('/');
  UniqueFd dir(fusefs::open_beneath(upper_fd,
                                    slash == std::string::npos ? "." : path.substr(0, slash),
                                    O_PATH | O_DIRECTORY | O_NOFOLLOW));
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  char target[4096];
  ssize_t n = dir ? ::readlinkat(dir.get(), base.c_str(), target, sizeof target) : -1;
  return n < 0 ? "?" : std::string(target, static_cast<size_t>(n));
}

const char* type_name(char t) {
  switch (t) {
    case 'd':
      return "a directory";
    case 'l':
      return "a symlink";
    case 'p':
      return "a fifo";
    case 's':
      return "a socket";
    case 'c':
    case 'b':
      return "a device node";
  }
  return "a file";
}

std::string type_suffix(char type) {
  switch (type) {
    case 'd':
      return "/";
    case 'l':
      return " (symlink)";
    case 'p':
      return " (fifo)";
    case 's':
      return " (socket: not committed)";
    case 'c':
    case 'b':
      return " (device node: never committed)";
  }
  return "";
}

// "(12 bytes, 0644)", "(mode 0644 -> 0755)", "(was a directory)": what a reviewer needs to see
// beyond the name.
std::string details(const Change& c) {
  std::vector<std::string> parts;
  if (c.type == 'f' && c.kind != ChangeKind::Deleted) {
    parts.push_back(std::to_string(c.size) + " bytes");
  }
  if (c.kind == ChangeKind::Added) {
    parts.push_back(octal(c.mode));
  } else if (c.kind == ChangeKind::Modified && c.old_type != 0 && c.old_type != c.type) {
    parts.push_back("was " + std::string(type_name(c.old_type)) + ", now " + octal(c.mode));
  } else if (c.kind == ChangeKind::Modified && c.mode != c.old_mode) {
    parts.push_back("mode " + octal(c.old_mode) + " -> " + octal(c.mode));
  }
  std::string out;
  for (const auto& p : parts) {
    out += (out.empty() ? "  (" : ", ") + p;
  }
  return out.empty() ? out : out + ")";
}

// Special bits the change turns on: commit never copies setuid/setgid, but a reviewer must see
// that the session asked for them; then the review warnings (fusefs/review_warnings.h).
std::string flags(const Change& c, int lower_fd, int upper_fd, const Colors& col) {
  if (c.kind == ChangeKind::Deleted) {
    return "";
  }
  uint32_t on = c.mode & ~(c.kind == ChangeKind::Modified && c.old_type == c.type ? c.old_mode : 0);
  std::string out;
  if (on & 04000) {
    out += "  [setuid bit: commit clears it]";
  }
  if (on & 02000) {
    out += "  [setgid bit: commit clears it]";
  }
  if (on & 01000) {
    out += "  [sticky bit]";
  }
  for (const auto& w : fusefs::review_warnings(c, lower_fd, upper_fd)) {
    out += "  [" + w + "]";
  }
  return out.empty() ? out : std::string(col.warn) + out + col.off;
}

const char* letter(const DiffEntry& e) {
  return e.renamed_from.empty() ? fusefs::change_letter(e.change.kind) : "R";
}

const char* label(const DiffEntry& e) {
  return e.renamed_from.empty() ? fusefs::change_kind_name(e.change.kind) : "renamed";
}

// The one line naming a change: kind, name(s), type, link target, size and mode, flags.
std::string describe(const DiffEntry& e, int lower_fd, int upper_fd, const Colors& c) {
  const Change& ch = e.change;
  std::string name =
      e.renamed_from.empty() ? shown(ch.path) : shown(e.renamed_from) + " -> " + shown(ch.path);
  std::string line = name + type_suffix(ch.type);
  if (ch.type == 'l' && ch.kind != ChangeKind::Deleted) {
    line += " -> " + shown(target_of(upper_fd, ch.path));
  }
  line += details(ch) + flags(ch, lower_fd, upper_fd, c);
  if (ch.is_protected) {
    line += std::string("  ") + c.warn + "[" + ch.protect_rule + "]" + c.off;
  }
  return line;
}

// `diff -u` of two open files, every line escaped (tabs kept), coloured on a tty. The header
// lines are printed here, with the escaped name: never diff(1)'s own.
void unified_diff(int old_fd, int new_fd, const std::string& old_label,
                  const std::string& new_label, const Colors& c) {
  std::printf("%s--- %s%s\n%s+++ %s%s\n", c.head, old_label.c_str(), c.off, c.head,
              new_label.c_str(), c.off);
  bool ok = unified_diff_lines(old_fd, new_fd, [&](std::string_view text) {
    const char* col = text.empty()     ? ""
                      : text[0] == '+' ? c.add
                      : text[0] == '-' ? c.del
                      : text[0] == '@' ? c.hunk
                                       : "";
    std::string safe = text::escaped(text, {.keep_tab = true});
    std::printf("%s%s%s\n", col, safe.c_str(), *col != '\0' ? c.off : "");
  });
  if (!ok) {
    std::printf("(diff(1) failed or is missing: %lld -> %lld bytes)\n",
                static_cast<long long>(size_of(old_fd)), static_cast<long long>(size_of(new_fd)));
  }
}

void print_content(const DiffEntry& e, int lower_fd, int upper_fd, const Colors& c) {
  const Change& ch = e.change;
  if (!e.renamed_from.empty() || ch.type != 'f' ||
      (ch.kind == ChangeKind::Modified && ch.old_type != 'f')) {
    return;
  }
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  auto sides = open_diff_sides(ch, lower_fd, upper_fd);
  if (!sides) {
    std::printf("(cannot open %s: %s)\n", shown(ch.path).c_str(), std::strerror(errno));
    return;
  }
  const UniqueFd& of = sides->old_side;
  const UniqueFd& nf = sides->new_side;
  int a = of ? of.get() : null.get();
  int b = nf ? nf.get() : null.get();
  if (sides->binary) {
    std::printf("Binary file %s: %lld -> %lld bytes\n", shown(ch.path).c_str(),
                static_cast<long long>(of ? size_of(a) : 0),
                static_cast<long long>(nf ? size_of(b) : 0));
    return;
  }
  unified_diff(a, b, of ? "a/" + shown(ch.path) : "/dev/null",
               nf ? "b/" + shown(ch.path) : "/dev/null", c);
}

void print_entry(const DiffEntry& e, int lower_fd, int upper_fd, bool stat_only, const Colors& c) {
  const Change& ch = e.change;
  if (stat_only) {
    const char* col = !e.renamed_from.empty()          ? c.hunk
                      : ch.kind == ChangeKind::Added   ? c.add
                      : ch.kind == ChangeKind::Deleted ? c.del
                                                       : c.warn;
    std::printf("%s%s%s %s\n", col, letter(e), c.off, describe(e, lower_fd, upper_fd, c).c_str());
    return;
  }
  std::printf("%s%s%s %s\n", c.head, label(e), c.off, describe(e, lower_fd, upper_fd, c).c_str());
  print_content(e, lower_fd, upper_fd, c);
}

UniqueFd open_dir_fd(const std::string& p) {
  return UniqueFd(::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

}  // namespace

int diff_command(const std::string& id, bool stat_only, const std::vector<std::string>& paths) {
  bool refused = false;
  auto s = open_cow_session(id, &refused);
  if (!s.ok()) {
    return refused ? say_refused("diff", s.error().to_string()) : say_failed("diff", s.error());
  }
  std::string note;
  policy::FilesystemPolicy pol = review_policy(*s, &note);
  // An imported session bound to no workspace is compared with an empty directory: its files
  // all show as added, and its deletions, which name nothing here, are listed from the layer.
  auto ws = open_session_workspace(*s);
  if (!ws.ok()) {
    return say_refused("diff", ws.error().to_string());
  }
  UniqueFd lower = std::move(*ws);
  auto changes = fusefs::diff_layers(lower.get(), s->lower, s->upper, &pol, s->format);
  if (!changes.ok()) {
    return say_failed("diff", changes.error());
  }
  std::vector<std::string> deletions;
  if (s->workspace.empty()) {
    auto d = layer_deletions(*s);
    if (!d.ok()) {
      return say_failed("diff", d.error());
    }
    for (auto& p : *d) {
      if (selected(p, paths)) {
        deletions.push_back(std::move(p));
      }
    }
  }
  UniqueFd upper = open_dir_fd(s->upper);
  if (!upper) {
    return say_failed("diff", sys_error("open(\"" + s->upper + "\")"));
  }
  std::vector<Change> picked;
  for (auto& c : *changes) {
    if (selected(c.path, paths)) {
      picked.push_back(std::move(c));
    }
  }
  std::vector<DiffEntry> entries = fusefs::pair_renames(picked, lower.get(), upper.get());
  size_t counts[4] = {0, 0, 0, 0};  // added, modified, deleted, renamed
  size_t protected_count = 0;
  for (const auto& e : entries) {
    counts[e.renamed_from.empty() ? static_cast<int>(e.change.kind) : 3]++;
    protected_count += e.change.is_protected ? 1 : 0;
  }
  counts[static_cast<int>(ChangeKind::Deleted)] += deletions.size();
  Colors col = colors_for_stdout();
  if (!note.empty()) {
    say_in("diff", shown(note));
  }
  // The counts first: a reviewer knows how much there is before any of it scrolls by.
  const size_t total = entries.size() + deletions.size();
  const std::string against =
      s->workspace.empty()
          ? "no workspace (imported; it ran on " + shown(s->origin.empty() ? "?" : s->origin) + ")"
          : shown(s->workspace);
  std::printf(
      "%zu change%s in session %s against %s: %zu added, %zu modified, %zu deleted, "
      "%zu renamed%s\n",
      total, total == 1 ? "" : "s", s->id.c_str(), against.c_str(), counts[0], counts[1], counts[2],
      counts[3],
      protected_count == 0 ? "" : ("; " + std::to_string(protected_count) + " protected").c_str());
  if (s->running) {
    std::printf("(the session is still running: this is its state now)\n");
  }
  if (protected_count != 0) {
    std::printf(
        "%sprotected: %zu change%s that would run code on the host (git hooks and config, "
        "editor and agent settings, CI); `cordon commit` leaves them out unless named%s\n",
        col.warn, protected_count, protected_count == 1 ? "" : "s", col.off);
    for (const auto& e : entries) {
      if (e.change.is_protected) {
        print_entry(e, lower.get(), upper.get(), stat_only, col);
      }
    }
    std::printf("%sthe other changes:%s\n", col.warn, col.off);
  }
  for (const auto& e : entries) {
    if (!e.change.is_protected) {
      print_entry(e, lower.get(), upper.get(), stat_only, col);
    }
  }
  for (const auto& p : deletions) {
    const bool whole = p.back() == '/';
    std::printf("%s%s%s %s  (%s)\n", stat_only ? col.del : col.head, stat_only ? "D" : "deleted",
                col.off, shown(p).c_str(),
                whole ? "replaced whole: all it held in the workspace it ran on"
                      : "in the workspace it ran on; its content is not in the archive");
  }
  return kReviewDone;
}

}  // namespace cordon::launcher
