// `cordon snapshot / rollback / diff / commit / discard ID`: the review workflow of a cow session.
// Snapshot and rollback of a running session go through cordon-fs's control socket (so the
// kernel's caches are invalidated and the program sees the restored tree at once); everything
// else works on the layers on disk with the fusefs library.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fusefs/control.h"
#include "fusefs/safe_io.h"
#include "fusefs/workflow.h"
#include "launcher/commands.h"
#include "launcher/cowfs_sidecar.h"
#include "launcher/session.h"
#include "launcher/session_store.h"
#include "policy/loader.h"

namespace cordon::launcher {
namespace {

using fusefs::Change;
using fusefs::ChangeKind;

// Exit codes (documented in `cordon --help`): done; refused (conflicts, wrong state, no such
// snapshot); cordon failed (bad id, unreadable session, I/O error).
constexpr int kDone = 0;
constexpr int kRefused = 1;
constexpr int kFailed = kExitCordonFailed;

int say_failed(const std::string& what, const Error& e) {
  std::fprintf(stderr, "cordon %s: %s\n", what.c_str(), e.to_string().c_str());
  return kFailed;
}

int say_refused(const std::string& what, const std::string& msg) {
  std::fprintf(stderr, "cordon %s: %s\n", what.c_str(), msg.c_str());
  return kRefused;
}

// One cow session, resolved and checked.
struct CowSession {
  std::string id, dir, upper, snapshots, control, workspace;
  bool running = false;  // cordon-fs answers on its control socket
};

Result<UniqueFd> connect_control(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return make_error("control socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return sys_error("socket(AF_UNIX)");
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return sys_error("connect(\"" + path + "\")");
  }
  return fd;
}

// Resolves ID, reads its cow record, and tells whether its cordon-fs still runs. *refused is set
// when the session exists but has no layer these commands read (ro/rw, overlay fallback).
Result<CowSession> open_session(const std::string& id_text, bool* refused) {
  *refused = false;
  const std::string root = sessions_root();
  ASSIGN_OR_RETURN(std::string id, resolve_session(root, id_text));
  ASSIGN_OR_RETURN(UniqueFd root_fd, store::open_root(root));
  ASSIGN_OR_RETURN(UniqueFd dir_fd, store::open_session_dir(root_fd.get(), id));
  SessionPaths p = session_paths(root, id);
  auto rec = read_cow_record(dir_fd.get());
  if (!rec.ok()) {
    *refused = true;
    return make_error("session " + id + " has no copy-on-write layer (it ran with --mode ro or rw)",
                      "only cow sessions (the default mode) have changes to review");
  }
  if (rec->backend != "cordon-fs") {
    *refused = true;
    return make_error("session " + id +
                          " ran on the kernel overlayfs fallback (cordon-fs was unavailable); "
                          "its layer " + p.upper + " is in overlayfs format, which these "
                          "commands do not read",
                      "inspect it directly; run as a user who may use /dev/fuse to get the workflow");
  }
  CowSession s{id, p.dir, p.upper, p.snapshots, p.control, rec->workspace};
  s.running = connect_control(p.control).ok();
  if (!s.running) {
    detach_stale_cow_mount(p.dir);  // its daemon was SIGKILLed with cordon: clean up after it
  }
  return s;
}

// One request on the control socket; the reply's "error" becomes an Error.
Result<nlohmann::json> control_request(const CowSession& s, const nlohmann::json& req) {
  ASSIGN_OR_RETURN(UniqueFd fd, connect_control(s.control));
  std::string line = req.dump() + "\n";
  if (::send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    return sys_error("send() on " + s.control);
  }
  std::string reply;
  char buf[4096];
  // A snapshot copies the whole upper layer: generous, but bounded.
  while (reply.find('\n') == std::string::npos && reply.size() < 65536) {
    pollfd p{fd.get(), POLLIN, 0};
    int n = ::poll(&p, 1, 600000);
    if (n <= 0) {
      return make_error("cordon-fs did not answer on " + s.control + " within 10 minutes");
    }
    ssize_t got = ::read(fd.get(), buf, sizeof buf);
    if (got <= 0) {
      return make_error("cordon-fs closed " + s.control + " without an answer",
                        "it may have ended with the session; run the command again");
    }
    reply.append(buf, static_cast<size_t>(got));
  }
  auto j = nlohmann::json::parse(reply.substr(0, reply.find('\n')), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return make_error("unreadable answer from cordon-fs: " + reply.substr(0, 200));
  }
  if (!j.value("ok", false)) {
    return make_error("cordon-fs: " + j.value("error", std::string("refused")));
  }
  return j;
}

std::vector<std::string> list_snapshots(const std::string& dir) {
  std::vector<std::string> out;
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd) {
    int err = 0;
    for (auto& n : fusefs::list_dir(fd.get(), &err)) {
      if (fusefs::valid_snapshot_name(n)) {
        out.push_back(n);
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string snapshot_list_text(const std::string& dir) {
  auto names = list_snapshots(dir);
  if (names.empty()) {
    return "this session has no snapshots";
  }
  std::string t = "its snapshots:";
  for (const auto& n : names) {
    t += " " + n;
  }
  return t;
}

bool is_dir(const std::string& p) {
  UniqueFd fd(::open(p.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  return fd.valid();
}

std::string default_snapshot_name() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "snap-%Y%m%d-%H%M%S", &tm);
  return buf;
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

// ---- diff ----

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

// The file at `rel` under `root_fd`, opened without following any symlink (a running sandbox
// could swap a directory for a link to host files between the walk and this open).
UniqueFd open_side(int root_fd, const std::string& rel) {
  return UniqueFd(fusefs::open_beneath(root_fd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
}

bool looks_binary(int fd) {
  char buf[8000];
  ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  return n > 0 && std::memchr(buf, '\0', static_cast<size_t>(n)) != nullptr;
}

bool same_bytes(int a, int b) {
  char ba[65536], bb[65536];
  for (off_t off = 0;;) {
    ssize_t na = ::pread(a, ba, sizeof ba, off);
    ssize_t nb = ::pread(b, bb, sizeof bb, off);
    if (na != nb || na < 0) {
      return false;
    }
    if (na == 0) {
      return true;
    }
    if (std::memcmp(ba, bb, static_cast<size_t>(na)) != 0) {
      return false;
    }
    off += na;
  }
}

off_t size_of(int fd) {
  struct stat st {};
  return fd >= 0 && ::fstat(fd, &st) == 0 ? st.st_size : 0;
}

// `diff -u` of two open files (fd 3 and 4 in diff(1)), coloured line by line on a tty.
void unified_diff(int old_fd, int new_fd, const std::string& old_label,
                  const std::string& new_label, const Colors& c) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    std::printf("(cannot run diff: pipe: %s)\n", std::strerror(errno));
    return;
  }
  std::vector<std::string> args = {"diff", "-u", "--label", old_label, "--label", new_label,
                                   "/dev/fd/3", "/dev/fd/4"};
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::dup2(out[1], 1) < 0 || ::dup2(old_fd, 3) < 0 || ::dup2(new_fd, 4) < 0) {
      ::_exit(126);
    }
    ::execvp("diff", argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  FILE* f = ::fdopen(out[0], "r");
  if (f == nullptr) {
    ::close(out[0]);
  } else {
    char* line = nullptr;
    size_t cap = 0;
    ssize_t n;
    while ((n = ::getline(&line, &cap, f)) > 0) {
      const char* col = "";
      if (std::strncmp(line, "+++", 3) == 0 || std::strncmp(line, "---", 3) == 0) {
        col = c.head;
      } else if (line[0] == '+') {
        col = c.add;
      } else if (line[0] == '-') {
        col = c.del;
      } else if (line[0] == '@') {
        col = c.hunk;
      }
      bool nl = line[n - 1] == '\n';
      if (nl) {
        line[n - 1] = '\0';
      }
      std::printf("%s%s%s\n", col, line, *col != '\0' ? c.off : "");
    }
    std::free(line);
    std::fclose(f);
  }
  int st = 0;
  if (pid > 0) {
    ::waitpid(pid, &st, 0);
  }
  if (pid < 0 || (WIFEXITED(st) && WEXITSTATUS(st) > 1)) {
    std::printf("(diff(1) failed or is missing: %lld -> %lld bytes)\n",
                static_cast<long long>(size_of(old_fd)), static_cast<long long>(size_of(new_fd)));
  }
}

struct Entry {
  Change change;
  std::string renamed_from;  // set: a deleted file with the same bytes (kind = Added)
};

// Pairs each added file with a deleted one holding the same bytes: a rename.
std::vector<Entry> find_renames(const std::vector<Change>& changes, int lower_fd, int upper_fd) {
  std::vector<Entry> out;
  std::vector<bool> used(changes.size(), false);
  for (size_t i = 0; i < changes.size(); ++i) {
    out.push_back({changes[i], ""});
  }
  for (size_t i = 0; i < changes.size(); ++i) {
    const Change& add = changes[i];
    if (add.kind != ChangeKind::Added || add.type != 'f') {
      continue;
    }
    UniqueFd nf = open_side(upper_fd, add.path);
    if (!nf) {
      continue;
    }
    for (size_t j = 0; j < changes.size(); ++j) {
      const Change& del = changes[j];
      if (used[j] || del.kind != ChangeKind::Deleted || del.type != 'f') {
        continue;
      }
      UniqueFd of = open_side(lower_fd, del.path);
      if (of && size_of(of.get()) == size_of(nf.get()) && same_bytes(of.get(), nf.get())) {
        used[j] = true;
        out[i].renamed_from = del.path;
        break;
      }
    }
  }
  std::vector<Entry> kept;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!used[i]) {
      kept.push_back(std::move(out[i]));
    }
  }
  return kept;
}

const char* kind_letter(const Entry& e) {
  if (!e.renamed_from.empty()) {
    return "R";
  }
  switch (e.change.kind) {
    case ChangeKind::Added:
      return "A";
    case ChangeKind::Modified:
      return "M";
    case ChangeKind::Deleted:
      return "D";
  }
  return "?";
}

const char* change_label(const Entry& e) {
  return e.renamed_from.empty() ? fusefs::change_kind_name(e.change.kind) : "renamed";
}

std::string type_suffix(char type) {
  switch (type) {
    case 'd':
      return "/";
    case 'l':
      return " (symlink)";
    case 'p':
      return " (fifo)";
  }
  return "";
}

void print_change(const Entry& e, int lower_fd, int upper_fd, bool stat_only, const Colors& c) {
  const Change& ch = e.change;
  const char* col = !e.renamed_from.empty()           ? c.hunk
                    : ch.kind == ChangeKind::Added    ? c.add
                    : ch.kind == ChangeKind::Deleted  ? c.del
                                                      : c.warn;
  std::string name = e.renamed_from.empty() ? ch.path : e.renamed_from + " -> " + ch.path;
  std::string prot = ch.is_protected ? std::string("  ") + c.warn +
                                           "[protected: would run code on the host; review it]" +
                                           c.off
                                     : "";
  if (stat_only) {
    std::string size;
    if (ch.type == 'f' && ch.kind != ChangeKind::Deleted) {
      size = "  (" + std::to_string(ch.size) + " bytes)";
    }
    std::printf("%s%s%s %s%s%s%s\n", col, kind_letter(e), c.off, name.c_str(),
                type_suffix(ch.type).c_str(), size.c_str(), prot.c_str());
    return;
  }
  std::printf("%s%s %s%s%s%s\n", c.head, change_label(e), name.c_str(),
              type_suffix(ch.type).c_str(), c.off, prot.c_str());
  if (!e.renamed_from.empty() || ch.type != 'f') {
    if (ch.type == 'l' && ch.kind != ChangeKind::Deleted) {
      char target[4096];
      UniqueFd dir(fusefs::open_beneath(upper_fd,
                                        ch.path.find('/') == std::string::npos
                                            ? "."
                                            : ch.path.substr(0, ch.path.rfind('/')),
                                        O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      std::string base = ch.path.substr(ch.path.rfind('/') + 1);
      ssize_t n = dir ? ::readlinkat(dir.get(), base.c_str(), target, sizeof target - 1) : -1;
      if (n >= 0) {
        std::printf("  -> %.*s\n", static_cast<int>(n), target);
      }
    }
    return;
  }
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  UniqueFd of = ch.kind == ChangeKind::Added ? UniqueFd() : open_side(lower_fd, ch.path);
  UniqueFd nf = ch.kind == ChangeKind::Deleted ? UniqueFd() : open_side(upper_fd, ch.path);
  if ((ch.kind != ChangeKind::Added && !of) || (ch.kind != ChangeKind::Deleted && !nf)) {
    std::printf("(cannot open %s: %s)\n", ch.path.c_str(), std::strerror(errno));
    return;
  }
  int a = of ? of.get() : null.get();
  int b = nf ? nf.get() : null.get();
  if ((of && looks_binary(a)) || (nf && looks_binary(b))) {
    std::printf("Binary file %s: %lld -> %lld bytes\n", ch.path.c_str(),
                static_cast<long long>(of ? size_of(a) : 0),
                static_cast<long long>(nf ? size_of(b) : 0));
    return;
  }
  unified_diff(a, b, of ? "a/" + ch.path : "/dev/null", nf ? "b/" + ch.path : "/dev/null", c);
}

Result<policy::Policy> session_policy(const CowSession& s) {
  try {
    return policy::load_policy_file(s.dir + "/policy.json");
  } catch (const std::exception& e) {
    return make_error(std::string("the session's policy.json: ") + e.what());
  }
}

UniqueFd open_dir_fd(const std::string& p) {
  return UniqueFd(::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

}  // namespace

int snapshot_command(const std::string& id, const std::string& name_arg) {
  bool refused = false;
  auto s = open_session(id, &refused);
  if (!s.ok()) {
    return refused ? say_refused("snapshot", s.error().to_string()) : say_failed("snapshot", s.error());
  }
  std::string name = name_arg.empty() ? default_snapshot_name() : name_arg;
  if (!fusefs::valid_snapshot_name(name)) {
    return say_refused("snapshot", "\"" + name +
                                       "\" is not a snapshot name: use 1-64 of A-Z a-z 0-9 . _ -, "
                                       "not starting with '.'");
  }
  const std::string dest = s->snapshots + "/" + name;
  if (is_dir(dest)) {
    return say_refused("snapshot", "session " + s->id + " already has a snapshot \"" + name +
                                       "\"; pick another name (" + snapshot_list_text(s->snapshots) +
                                       ")");
  }
  if (s->running) {
    auto r = control_request(*s, {{"op", "snapshot"}, {"name", name}});
    if (!r.ok()) {
      return say_failed("snapshot", r.error());
    }
  } else if (auto st = fusefs::snapshot_layer(s->upper, dest); !st.ok()) {
    return say_failed("snapshot", st.error());
  }
  std::printf("cordon: snapshot \"%s\" of session %s%s: %s\n", name.c_str(), s->id.c_str(),
              s->running ? " (taken live)" : "", dest.c_str());
  std::printf("cordon: back to it with: cordon rollback %s %s\n", s->id.c_str(), name.c_str());
  return kDone;
}

int rollback_command(const std::string& id, const std::string& name) {
  bool refused = false;
  auto s = open_session(id, &refused);
  if (!s.ok()) {
    return refused ? say_refused("rollback", s.error().to_string()) : say_failed("rollback", s.error());
  }
  std::string snap;
  if (!name.empty()) {
    if (!fusefs::valid_snapshot_name(name) || !is_dir(s->snapshots + "/" + name)) {
      return say_refused("rollback", "session " + s->id + " has no snapshot \"" + name + "\"; " +
                                         snapshot_list_text(s->snapshots));
    }
    snap = s->snapshots + "/" + name;
  }
  if (s->running) {
    nlohmann::json req = {{"op", "rollback"}};
    if (!name.empty()) {
      req["name"] = name;
    }
    auto r = control_request(*s, req);
    if (!r.ok()) {
      return say_failed("rollback", r.error());
    }
  } else if (auto st = fusefs::restore_layer(s->upper, snap); !st.ok()) {
    return say_failed("rollback", st.error());
  }
  std::printf("cordon: session %s rolled back to %s%s\n", s->id.c_str(),
              name.empty() ? "its start" : ("snapshot \"" + name + "\"").c_str(),
              s->running ? " (live: the program sees it now)" : "");
  return kDone;
}

int diff_command(const std::string& id, bool stat_only, const std::vector<std::string>& paths) {
  bool refused = false;
  auto s = open_session(id, &refused);
  if (!s.ok()) {
    return refused ? say_refused("diff", s.error().to_string()) : say_failed("diff", s.error());
  }
  auto pol = session_policy(*s);
  auto changes = fusefs::diff_layers(s->workspace, s->upper,
                                     pol.ok() ? &pol->filesystem : nullptr);
  if (!changes.ok()) {
    return say_failed("diff", changes.error());
  }
  UniqueFd lower = open_dir_fd(s->workspace);
  UniqueFd upper = open_dir_fd(s->upper);
  if (!lower || !upper) {
    return say_failed("diff", sys_error("open(\"" + (lower ? s->upper : s->workspace) + "\")"));
  }
  std::vector<Change> picked;
  for (auto& c : *changes) {
    if (selected(c.path, paths)) {
      picked.push_back(c);
    }
  }
  std::vector<Entry> entries = find_renames(picked, lower.get(), upper.get());
  Colors col = colors_for_stdout();
  size_t counts[4] = {0, 0, 0, 0};  // added, modified, deleted, renamed
  for (const auto& e : entries) {
    print_change(e, lower.get(), upper.get(), stat_only, col);
    counts[e.renamed_from.empty() ? static_cast<int>(e.change.kind) : 3]++;
  }
  if (stat_only || entries.empty()) {
    std::printf("%zu change%s in session %s against %s: %zu added, %zu modified, %zu deleted, "
                "%zu renamed\n",
                entries.size(), entries.size() == 1 ? "" : "s", s->id.c_str(),
                s->workspace.c_str(), counts[0], counts[1], counts[2], counts[3]);
  }
  return kDone;
}

namespace {

// As root, commit writes the workspace as root; the files should belong to whoever the sandbox
// ran as (cordon-fs gave the upper copies that owner). Read before the commit drops them.
struct Owner {
  std::string path;
  uid_t uid;
  gid_t gid;
};

std::pair<std::string, std::string> split_path(const std::string& rel) {
  size_t slash = rel.rfind('/');
  return slash == std::string::npos ? std::pair<std::string, std::string>{".", rel}
                                    : std::pair{rel.substr(0, slash), rel.substr(slash + 1)};
}

std::vector<Owner> upper_owners(const CowSession& s, const std::vector<std::string>& paths) {
  std::vector<Owner> out;
  auto changes = fusefs::diff_layers(s.workspace, s.upper);
  UniqueFd upper = open_dir_fd(s.upper);
  if (!changes.ok() || !upper) {
    return out;
  }
  for (const auto& c : *changes) {
    if (c.kind == ChangeKind::Deleted || !selected(c.path, paths)) {
      continue;
    }
    auto [dir, name] = split_path(c.path);
    UniqueFd d(fusefs::open_beneath(upper.get(), dir, O_PATH | O_DIRECTORY | O_NOFOLLOW));
    struct stat st {};
    if (d && ::fstatat(d.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      out.push_back({c.path, st.st_uid, st.st_gid});
    }
  }
  return out;
}

void restore_owners(const CowSession& s, const std::vector<Owner>& owners) {
  UniqueFd ws = open_dir_fd(s.workspace);
  for (const auto& o : owners) {
    auto [dir, name] = split_path(o.path);
    UniqueFd d(ws ? fusefs::open_beneath(ws.get(), dir, O_PATH | O_DIRECTORY | O_NOFOLLOW) : -1);
    if (d) {
      (void)::fchownat(d.get(), name.c_str(), o.uid, o.gid, AT_SYMLINK_NOFOLLOW);
    }
  }
}

}  // namespace

int commit_command(const std::string& id, const std::vector<std::string>& paths) {
  bool refused = false;
  auto s = open_session(id, &refused);
  if (!s.ok()) {
    return refused ? say_refused("commit", s.error().to_string()) : say_failed("commit", s.error());
  }
  if (s->running) {
    return say_refused("commit", "session " + s->id +
                                     " is still running (cordon-fs serves its view); commit once "
                                     "the program has ended");
  }
  std::vector<Owner> owners = ::geteuid() == 0 ? upper_owners(*s, paths) : std::vector<Owner>{};
  auto r = fusefs::commit_layers(s->workspace, s->upper, paths);
  if (!r.ok()) {
    return say_failed("commit", r.error());
  }
  if (!r->conflicts.empty()) {
    std::fprintf(stderr,
                 "cordon commit: refused: %zu file%s changed in %s since the session read %s; "
                 "nothing was applied:\n",
                 r->conflicts.size(), r->conflicts.size() == 1 ? "" : "s", s->workspace.c_str(),
                 r->conflicts.size() == 1 ? "it" : "them");
    for (const auto& c : r->conflicts) {
      std::fprintf(stderr, "  %s\n", c.c_str());
    }
    std::fprintf(stderr,
                 "cordon commit: review with `cordon diff %s`; commit the other paths by naming "
                 "them, or `cordon discard %s`\n",
                 s->id.c_str(), s->id.c_str());
    return kRefused;
  }
  restore_owners(*s, owners);
  for (const auto& p : r->applied) {
    std::printf("  %s\n", p.c_str());
  }
  std::printf("cordon: committed %zu change%s of session %s to %s\n", r->applied.size(),
              r->applied.size() == 1 ? "" : "s", s->id.c_str(), s->workspace.c_str());
  return kDone;
}

int discard_command(const std::string& id) {
  bool refused = false;
  auto s = open_session(id, &refused);
  if (!s.ok()) {
    return refused ? say_refused("discard", s.error().to_string()) : say_failed("discard", s.error());
  }
  if (s->running) {
    return say_refused("discard", "session " + s->id +
                                      " is still running; undo its changes live with `cordon "
                                      "rollback " + s->id + "`, or discard once it has ended");
  }
  if (auto st = fusefs::discard_layer(s->upper); !st.ok()) {
    return say_failed("discard", st.error());
  }
  UniqueFd snaps = open_dir_fd(s->snapshots);
  if (snaps) {
    if (int rc = fusefs::clear_dir(snaps.get()); rc != 0) {
      errno = -rc;
      return say_failed("discard", sys_error("clearing " + s->snapshots));
    }
  }
  std::printf("cordon: discarded every change and snapshot of session %s; %s is as it was (the "
              "log stays: cordon log %s)\n",
              s->id.c_str(), s->workspace.c_str(), s->id.c_str());
  return kDone;
}

}  // namespace cordon::launcher
