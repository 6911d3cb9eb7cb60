// A commit as a transaction: validate, stage hidden, journal, rename into place, then clean up.
#include "fusefs/commit.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/stat.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <map>
#include <set>

#include "fusefs/commit_journal.h"
#include "fusefs/commit_plan.h"
#include "fusefs/layer_names.h"
#include "fusefs/review_warnings.h"
#include "fusefs/safe_io.h"

namespace cordon::fusefs {
namespace {

UniqueFd open_root(const std::string& path) {
  return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

// A directory `rel` under root ("" = root itself), opened without following symlinks.
UniqueFd open_dir_at(int root, const std::string& rel) {
  if (rel.empty()) {
    return UniqueFd(::fcntl(root, F_DUPFD_CLOEXEC, 0));
  }
  return UniqueFd(open_beneath(root, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
}

// The mount a directory is on: renames work within one mount only, so each gets its own
// staging directory. statx's mount id tells bind mounts of one filesystem apart.
uint64_t mount_of(int fd) {
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &sx) == 0 &&
      (sx.stx_mask & STATX_MNT_ID) != 0) {
    return sx.stx_mnt_id;
  }
  struct stat st {};
  ::fstat(fd, &st);
  return static_cast<uint64_t>(st.st_dev) | (uint64_t{1} << 63);
}

bool lstat_at(int dirfd, const std::string& name, struct stat* st) {
  return ::fstatat(dirfd, name.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0;
}

// Who owns what the commit creates. As root: the owner of the object it replaces, else of the
// directory it lands in (never the sandbox's id). As anyone else: the committer, by necessity.
struct Owner {
  bool set = false;
  uid_t uid = 0;
  gid_t gid = 0;
  bool inherit_setgid = false;  // the real directory is setgid: new directories are too
};

// The mode a committed object gets: the session's bits without setuid and setgid (set on a
// file by the sandbox, a root-owned setuid binary is a way out of it).
mode_t committed_mode(const struct stat& st, const Owner& o) {
  mode_t m = st.st_mode & 01777;
  if (S_ISDIR(st.st_mode) && o.inherit_setgid) {
    m |= S_ISGID;
  }
  return m;
}

// Owner, then mode: chown(2) clears setuid/setgid, and a file must never be visible with a
// mode it had under another owner. Everything here sits in the 0700 staging directory.
int set_owner_and_mode(int fd, const struct stat& st, const Owner& o) {
  if (o.set && ::fchown(fd, o.uid, o.gid) != 0) {
    return -errno;
  }
  if (::fchmod(fd, committed_mode(st, o)) != 0) {
    return -errno;
  }
  timespec times[2] = {st.st_atim, st.st_mtim};
  if (::futimens(fd, times) != 0) {
    return -errno;
  }
  return ::fsync(fd) == 0 ? 0 : -errno;
}

class Transaction {
 public:
  Transaction(int lower, int upper, const CommitOptions& o)
      : lower_(lower), upper_(upper), o_(o), staging_(staging_dir_name(o.session_id)) {}

  // Runs a planned commit: stage, journal, apply, finish.
  Status run(const CommitPlan& plan, CommitReport* report) {
    plan_ = &plan;
    build_children();
    TRY(open_journal());
    if (auto st = stage_all(report->held.empty()); !st.ok()) {
      // Nothing reached the workspace: only the hidden staging directories go.
      (void)remove_staging();
      (void)remove_journal();
      return st;
    }
    Status st = apply();
    if (st.ok()) {
      st = sync_touched();
    }
    if (st.ok()) {
      st = append_journal(journal_fd_.get(), kJournalDone);
    }
    if (!st.ok()) {
      return undo_after(std::move(st).error());
    }
    journal_.done = true;
    if (o_.before_step) {
      o_.before_step(journal_.ops.size());  // tests: the commit point is written
    }
    if (auto fin = finish(); !fin.ok()) {
      return std::move(fin).error().with_context(
          "the commit is in the workspace, but cleaning up after it failed (run `cordon "
          "commit` again to finish)");
    }
    return {};
  }

  // An interrupted commit's journal: undone before its commit point, completed after it.
  Result<std::string> recover(UniqueFd journal_fd, Journal j) {
    journal_fd_ = std::move(journal_fd);
    journal_ = std::move(j);
    for (const auto& dir : journal_.stages) {
      UniqueFd parent = open_dir_at(lower_, dir);
      stages_.push_back(parent ? UniqueFd(open_beneath(parent.get(), staging_,
                                                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW))
                               : UniqueFd());
    }
    if (journal_.done) {
      TRY(finish());
      return "an interrupted commit was completed: its " + std::to_string(journal_.drop.size()) +
             " changes are in the workspace";
    }
    if (journal_.ops_complete) {
      TRY(undo());
    }
    TRY(remove_staging());
    TRY(remove_journal());
    return std::string(
        "an interrupted commit was undone: the workspace is as it was before that commit");
  }

 private:
  // ---- staging -------------------------------------------------------------------------

  // Every new object built in the staging directories, then every op journaled at once.
  Status stage_all(bool nothing_held) {
    for (size_t i : op_order()) {
      TRY(stage_entry(i));
    }
    journal_.clear_upper = o_.only.empty() && nothing_held;
    for (const auto& e : plan_->entries) {
      if (e.state == EntryState::Apply) {
        journal_.drop.push_back(e.change.path);
      }
    }
    TRY(append_journal(journal_fd_.get(), journal_ops_text(journal_)));
    journal_.ops_complete = true;
    return {};
  }

  void build_children() {
    for (size_t i = 0; i < plan_->entries.size(); ++i) {
      const PlannedEntry& e = plan_->entries[i];
      if (e.state == EntryState::Apply && e.covered) {
        children_[split_path(e.change.path).first].push_back(i);
      }
    }
  }

  // Removals deepest first, then creations parents first, then directory modes deepest first
  // (a directory the session made read-only must not block what lands in it).
  std::vector<size_t> op_order() const {
    std::vector<size_t> removes, puts, modes;
    for (size_t i = 0; i < plan_->entries.size(); ++i) {
      const PlannedEntry& e = plan_->entries[i];
      if (e.state != EntryState::Apply || e.covered) {
        continue;
      }
      const Change& c = e.change;
      if (c.kind == ChangeKind::Deleted) {
        removes.push_back(i);
      } else if (c.kind == ChangeKind::Modified && c.type == 'd' && c.old_type == 'd') {
        modes.push_back(i);
      } else {
        puts.push_back(i);
      }
    }
    std::reverse(removes.begin(), removes.end());
    std::reverse(modes.begin(), modes.end());
    removes.insert(removes.end(), puts.begin(), puts.end());
    removes.insert(removes.end(), modes.begin(), modes.end());
    return removes;
  }

  Status open_journal() {
    std::string path = o_.session_dir + "/" + kCommitJournal;
    journal_fd_.reset(::open(
        path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!journal_fd_) {
      return sys_error("creating the commit journal " + path);
    }
    return append_journal(journal_fd_.get(), kJournalHeader);
  }

  // The staging directory for objects landing in the real directory `dir`: one per mount, in
  // the shallowest directory of the workspace on that mount. Made (after its journal line) on
  // first use.
  Result<size_t> stage_for(const std::string& dir) {
    UniqueFd d = open_dir_at(lower_, dir);
    if (!d) {
      return sys_error("opening the workspace's directory " + (dir.empty() ? "." : dir));
    }
    uint64_t mnt = mount_of(d.get());
    if (auto it = stage_by_mount_.find(mnt); it != stage_by_mount_.end()) {
      return it->second;
    }
    std::string top = dir;
    while (!top.empty()) {
      std::string up = split_path(top).first;
      UniqueFd u = open_dir_at(lower_, up);
      if (!u || mount_of(u.get()) != mnt) {
        break;
      }
      top = up;
    }
    TRY(append_journal(journal_fd_.get(), journal_stage_line(top)));
    journal_.stages.push_back(top);
    UniqueFd parent = open_dir_at(lower_, top);
    if (!parent || ::mkdirat(parent.get(), staging_.c_str(), 0700) != 0) {
      return sys_error("making the staging directory " + (top.empty() ? "" : top + "/") + staging_,
                       "remove it if a crashed commit left it and no journal names it");
    }
    UniqueFd s(open_beneath(parent.get(), staging_, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
    struct stat st {};
    if (!s || ::fstat(s.get(), &st) != 0 || st.st_uid != ::geteuid() ||
        (st.st_mode & 07777) != 0700) {
      return make_error("the staging directory " + staging_ + " is not the private one just made");
    }
    stages_.push_back(std::move(s));
    stage_by_mount_[mnt] = stages_.size() - 1;
    return stages_.size() - 1;
  }

  Owner owner_for(const PlannedEntry& e, int real_parent) const {
    Owner o;
    struct stat pst {};
    bool have_parent = ::fstat(real_parent, &pst) == 0;
    o.inherit_setgid = have_parent && (pst.st_mode & S_ISGID) != 0;
    if (::geteuid() != 0) {
      return o;
    }
    o.set = true;
    if (e.real_exists) {
      o.uid = e.real.st_uid;  // an existing file keeps its owner
      o.gid = e.real.st_gid;
    } else {
      o.uid = pst.st_uid;  // a new one gets its directory's
      o.gid = pst.st_gid;
    }
    return o;
  }

  // Builds the session's object at `rel` (and, for a new directory, everything the commit puts
  // beneath it) as `name` in the directory `dst`. 0 or -errno.
  int build(const std::string& rel, const struct stat& ust, int dst, const std::string& name,
            const Owner& owner) {
    auto [dir, base] = split_path(rel);
    UniqueFd udir = open_dir_at(upper_, dir);
    if (!udir) {
      return -errno;
    }
    if (S_ISREG(ust.st_mode)) {
      return build_file(udir.get(), base, ust, dst, name, owner);
    }
    if (S_ISLNK(ust.st_mode) || S_ISFIFO(ust.st_mode)) {
      return build_node(udir.get(), base, ust, dst, name, owner);
    }
    if (S_ISDIR(ust.st_mode)) {
      return build_dir(udir.get(), rel, ust, dst, name, owner);
    }
    return -EOPNOTSUPP;  // the plan holds sockets and devices back; never reached
  }

  static int build_file(int udir, const std::string& base, const struct stat& ust, int dst,
                        const std::string& name, const Owner& owner) {
    UniqueFd src(open_beneath(udir, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
    UniqueFd out(
        ::openat(dst, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    struct stat now {};
    if (!src || !out || ::fstat(src.get(), &now) != 0) {
      return -errno;
    }
    if (!S_ISREG(now.st_mode)) {
      return -ESTALE;  // swapped since the diff
    }
    if (int rc = clone_or_copy(src.get(), out.get()); rc != 0) {
      return rc;
    }
    if (int rc = copy_xattrs(src.get(), out.get(), xattr_commits); rc != 0) {
      return rc;
    }
    return set_owner_and_mode(out.get(), ust, owner);
  }

  // A symlink (its target copied as text, never followed) or a fifo.
  static int build_node(int udir, const std::string& base, const struct stat& ust, int dst,
                        const std::string& name, const Owner& owner) {
    if (S_ISLNK(ust.st_mode)) {
      std::string target(PATH_MAX + 1, '\0');  // heap: build() recurses
      ssize_t n = ::readlinkat(udir, base.c_str(), target.data(), PATH_MAX);
      if (n < 0) {
        return -errno;
      }
      target.resize(static_cast<size_t>(n));
      if (::symlinkat(target.c_str(), dst, name.c_str()) != 0) {
        return -errno;
      }
    } else if (::mkfifoat(dst, name.c_str(), 0600) != 0) {
      return -errno;
    }
    if (owner.set && ::fchownat(dst, name.c_str(), owner.uid, owner.gid, AT_SYMLINK_NOFOLLOW)) {
      return -errno;
    }
    if (S_ISFIFO(ust.st_mode) && ::fchmodat(dst, name.c_str(), committed_mode(ust, owner), 0)) {
      return -errno;
    }
    timespec times[2] = {ust.st_atim, ust.st_mtim};
    return ::utimensat(dst, name.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
  }

  int build_dir(int udir, const std::string& rel, const struct stat& ust, int dst,
                const std::string& name, const Owner& owner) {
    if (::mkdirat(dst, name.c_str(), 0700) != 0) {
      return -errno;
    }
    UniqueFd d(open_beneath(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
    UniqueFd usrc(open_beneath(udir, split_path(rel).second, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
    if (!d || !usrc) {
      return -errno;
    }
    if (int rc = copy_xattrs(usrc.get(), d.get(), xattr_commits); rc != 0) {
      return rc;
    }
    if (auto it = children_.find(rel); it != children_.end()) {
      for (size_t i : it->second) {
        const Change& c = plan_->entries[i].change;
        struct stat cst;
        std::string child = split_path(c.path).second;
        if (!lstat_at(usrc.get(), child, &cst)) {
          return -errno;
        }
        // Beneath a new directory everything gets that directory's owner.
        if (int rc = build(c.path, cst, d.get(), child, owner); rc != 0) {
          return rc;
        }
      }
    }
    return set_owner_and_mode(d.get(), ust, owner);
  }

  Status stage_entry(size_t i) {
    const PlannedEntry& e = plan_->entries[i];
    const Change& c = e.change;
    auto [dir, base] = split_path(c.path);
    JournalOp op;
    op.path = c.path;
    if (c.kind == ChangeKind::Modified && c.type == 'd' && c.old_type == 'd') {
      op.kind = OpKind::Chmod;
      op.old_ino = e.real.st_ino;
      op.old_mode = e.real.st_mode & 07777;
      op.new_mode = (c.mode & 01777) | (e.real.st_mode & S_ISGID);
      journal_.ops.push_back(std::move(op));
      return {};
    }
    ASSIGN_OR_RETURN(op.stage, stage_for(dir));
    op.name = "n" + std::to_string(journal_.ops.size());
    if (e.real_exists) {
      op.old_ino = e.real.st_ino;
      op.old_size = static_cast<uint64_t>(e.real.st_size);
      op.old_mtime_ns =
          static_cast<int64_t>(e.real.st_mtim.tv_sec) * 1000000000 + e.real.st_mtim.tv_nsec;
    }
    if (c.kind == ChangeKind::Deleted) {
      op.kind = OpKind::Remove;
      journal_.ops.push_back(std::move(op));
      return {};
    }
    op.kind = e.real_exists ? OpKind::Swap : OpKind::Put;
    UniqueFd udir = open_dir_at(upper_, dir);
    UniqueFd real_parent = open_dir_at(lower_, dir);
    struct stat ust;
    if (!udir || !real_parent || !lstat_at(udir.get(), base, &ust)) {
      return sys_error("reading " + c.path + " for the commit");
    }
    int stage = stages_[op.stage].get();
    if (int rc = build(c.path, ust, stage, op.name, owner_for(e, real_parent.get())); rc != 0) {
      errno = -rc;
      return sys_error("staging " + c.path + " for the commit");
    }
    struct stat sst;
    if (!lstat_at(stage, op.name, &sst)) {
      return sys_error("stat of the staged " + c.path);
    }
    op.new_ino = sst.st_ino;
    journal_.ops.push_back(std::move(op));
    return {};
  }

  // ---- applying ------------------------------------------------------------------------

  Status apply() {
    for (size_t k = 0; k < journal_.ops.size(); ++k) {
      const JournalOp& op = journal_.ops[k];
      if (o_.before_step) {
        o_.before_step(k);
      }
      TRY(apply_one(op));
      applied_ = k + 1;
    }
    return {};
  }

  Status apply_one(const JournalOp& op) {
    auto [dir, base] = split_path(op.path);
    UniqueFd parent = open_dir_at(lower_, dir);
    if (!parent) {
      return sys_error("opening the workspace's directory of " + op.path);
    }
    touched_.insert(dir);
    if (op.kind == OpKind::Chmod) {
      UniqueFd d(open_beneath(parent.get(), base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      struct stat st {};
      if (!d || ::fstat(d.get(), &st) != 0 || st.st_ino != op.old_ino) {
        return make_error(op.path + " changed in the workspace during the commit");
      }
      if (::fchmod(d.get(), op.new_mode) != 0) {
        return sys_error("chmod of " + op.path);
      }
      return {};
    }
    int stage = stages_[op.stage].get();
    int rc = 0;
    switch (op.kind) {
      case OpKind::Put:
        rc = ::renameat2(stage, op.name.c_str(), parent.get(), base.c_str(), RENAME_NOREPLACE);
        break;
      case OpKind::Swap:
        rc = ::renameat2(stage, op.name.c_str(), parent.get(), base.c_str(), RENAME_EXCHANGE);
        break;
      case OpKind::Remove:
        rc = ::renameat2(parent.get(), base.c_str(), stage, op.name.c_str(), RENAME_NOREPLACE);
        break;
      case OpKind::Chmod:
        break;
    }
    if (rc != 0) {
      return sys_error("renaming " + op.path + " into place",
                       errno == EEXIST ? "something was created there during the commit" : "");
    }
    if (op.kind != OpKind::Put) {
      // What went into the staging directory must be what was validated: a file the user
      // wrote in the meantime would otherwise be swept away with the staging directory.
      TRY(verify_moved(op));
    }
    return {};
  }

  // The workspace object now at stage/name (and, for a directory, everything beneath it) is
  // the one validated: same inode, nothing added, nothing changed.
  Status verify_moved(const JournalOp& op) {
    int stage = stages_[op.stage].get();
    struct stat st {};
    const PlannedEntry* e = plan_->find(op.path);
    // The rename itself moves ctime; the inode, size and mtime stay unless someone wrote.
    if (!lstat_at(stage, op.name, &st) || e == nullptr || st.st_ino != e->real.st_ino ||
        st.st_size != e->real.st_size || st.st_mtim.tv_sec != e->real.st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != e->real.st_mtim.tv_nsec) {
      return make_error(op.path + " changed in the workspace during the commit");
    }
    if (!S_ISDIR(st.st_mode)) {
      return {};
    }
    size_t seen = 0;
    TRY(verify_tree(stage, op.name, op.path, &seen));
    // The plan's entries beneath op.path: the paths from "P/" up to "P0" ('0' follows '/').
    auto& idx = plan_->index;
    auto expected = static_cast<size_t>(
        std::distance(idx.lower_bound(op.path + "/"), idx.lower_bound(op.path + "0")));
    if (seen != expected) {
      return make_error(op.path +
                        " changed in the workspace during the commit (entries were added "
                        "to it)");
    }
    return {};
  }

  Status verify_tree(int dirfd, const std::string& name, const std::string& rel, size_t* seen) {
    UniqueFd d(open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
    if (!d) {
      return sys_error("reading the moved " + rel);
    }
    int err = 0;
    for (const auto& n : list_dir(d.get(), &err)) {
      std::string child = rel + "/" + n;
      const PlannedEntry* e = plan_->find(child);
      struct stat st {};
      if (e == nullptr || e->change.kind != ChangeKind::Deleted || !lstat_at(d.get(), n, &st) ||
          st.st_ino != e->real.st_ino || st.st_ctim.tv_sec != e->real.st_ctim.tv_sec ||
          st.st_ctim.tv_nsec != e->real.st_ctim.tv_nsec) {
        return make_error(child + " changed in the workspace during the commit");
      }
      ++*seen;
      if (S_ISDIR(st.st_mode)) {
        TRY(verify_tree(d.get(), n, child, seen));
      }
    }
    if (err != 0) {
      errno = err;
      return sys_error("reading the moved " + rel);
    }
    return {};
  }

  // Renames and directory entries reach the disk before the commit point is written.
  Status sync_touched() {
    for (const auto& dir : touched_) {
      UniqueFd d = open_dir_at(lower_, dir);
      if (d && ::fsync(d.get()) != 0) {
        return sys_error("fsync of the workspace's directory " + (dir.empty() ? "." : dir));
      }
    }
    for (const auto& s : stages_) {
      if (s && ::fsync(s.get()) != 0) {
        return sys_error("fsync of the staging directory");
      }
    }
    return {};
  }

  // ---- undo --------------------------------------------------------------------------------

  // Puts back every op that ran, newest first. Each op looks at the inodes to see whether it
  // ran, so this also serves a journal whose commit was killed at an unknown point.
  Status undo() {
    std::vector<std::string> failed;
    std::string validated;
    for (auto it = journal_.ops.rbegin(); it != journal_.ops.rend(); ++it) {
      if (!undo_one(*it)) {
        failed.push_back(it->path);
      } else if (it->kind == OpKind::Swap || it->kind == OpKind::Remove) {
        validated += back_in_place(*it);
      }
    }
    if (!validated.empty()) {
      TRY(record_validated(validated));
    }
    if (failed.empty()) {
      return {};
    }
    std::string list;
    for (const auto& p : failed) {
      list += (list.empty() ? "" : ", ") + p;
    }
    return make_error("could not put back " + list + " (the workspace's originals are kept in " +
                          staging_ + " and the journal in " + o_.session_dir + ")",
                      "fix what blocks it and run `cordon commit` or `cordon discard` again");
  }

  bool undo_one(const JournalOp& op) {
    auto [dir, base] = split_path(op.path);
    UniqueFd parent = open_dir_at(lower_, dir);
    struct stat at_path {};
    bool present = parent && lstat_at(parent.get(), base, &at_path);
    if (op.kind == OpKind::Chmod) {
      if (!present || at_path.st_ino != op.old_ino) {
        return true;  // not the directory it changed: nothing of ours to undo
      }
      UniqueFd d(open_beneath(parent.get(), base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      return d && ::fchmod(d.get(), op.old_mode) == 0;
    }
    if (op.stage >= stages_.size() || !stages_[op.stage]) {
      return !present || at_path.st_ino != op.new_ino;  // no staging: it never ran
    }
    int stage = stages_[op.stage].get();
    struct stat staged {};
    bool in_stage = lstat_at(stage, op.name, &staged);
    // Whether the op ran: our staged inode stands at the path (put, swap), or the staging name
    // of a removal is taken (nothing else ever uses it). Whatever it moved aside goes back, even
    // if it is not what was validated: it is the user's.
    switch (op.kind) {
      case OpKind::Put:
        if (present && at_path.st_ino == op.new_ino) {
          return ::renameat2(parent.get(), base.c_str(), stage, op.name.c_str(),
                             RENAME_NOREPLACE) == 0;
        }
        return true;
      case OpKind::Swap:
        if (present && at_path.st_ino == op.new_ino) {
          return in_stage && ::renameat2(stage, op.name.c_str(), parent.get(), base.c_str(),
                                         RENAME_EXCHANGE) == 0;
        }
        return true;
      case OpKind::Remove:
        if (in_stage) {
          return parent && ::renameat2(stage, op.name.c_str(), parent.get(), base.c_str(),
                                       RENAME_NOREPLACE) == 0;
        }
        return true;
      case OpKind::Chmod:
        break;
    }
    return true;
  }

  // The record of a validated workspace object an undo put back ("" if something else is
  // there): putting it back moved its ctime, and the next commit must still know it.
  std::string back_in_place(const JournalOp& op) const {
    auto [dir, base] = split_path(op.path);
    UniqueFd parent = open_dir_at(lower_, dir);
    struct stat st {};
    if (!parent || !lstat_at(parent.get(), base, &st) || st.st_ino != op.old_ino) {
      return "";
    }
    return validated_line(op.path, op.old_ino, op.old_size, op.old_mtime_ns) + "\n";
  }

  Status record_validated(const std::string& lines) {
    std::string path = o_.session_dir + "/" + kCommitValidated;
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) {
      return sys_error("opening " + path);
    }
    return append_journal(fd.get(), lines);
  }

  Error undo_after(Error failure) {
    std::string state;
    if (auto st = undo(); !st.ok()) {
      // The journal and the staging directory stay: the next commit or discard retries.
      return make_error(failure.to_string() + "; undoing the " + std::to_string(applied_) +
                            " changes applied before it failed too: " + st.error().to_string(),
                        st.error().hint);
    }
    (void)remove_staging();
    (void)remove_journal();
    failure.message += " (the " + std::to_string(applied_) +
                       " changes applied before it were undone: the workspace is as it was "
                       "before the commit)";
    return failure;
  }

  // ---- after the commit point ----------------------------------------------------------

  Status finish() {
    if (!journal_.clear_upper && !journal_.merged) {
      TRY(merge_opaque_dirs());
      TRY(append_journal(journal_fd_.get(), kJournalMerged));
      journal_.merged = true;
    }
    if (journal_.clear_upper) {
      if (int rc = clear_dir(upper_); rc != 0) {
        errno = -rc;
        return sys_error("clearing the committed upper layer");
      }
    } else {
      std::vector<std::string> drop = journal_.drop;
      std::sort(drop.rbegin(), drop.rend());  // beneath before above
      for (const auto& p : drop) {
        drop_from_upper(p);
      }
    }
    TRY(remove_staging());
    return remove_journal();
  }

  // An opaque upper directory over a real one the commit changed: the real one now holds what
  // was committed, so the upper must stop hiding it (whiteouts for what was held back).
  Status merge_opaque_dirs() {
    std::set<std::string> dirs;
    for (const auto& p : journal_.drop) {
      for (std::string d = p; !d.empty(); d = split_path(d).first) {
        dirs.insert(d);
      }
    }
    for (const auto& d : dirs) {
      UniqueFd u = open_dir_at(upper_, d);
      UniqueFd l = open_dir_at(lower_, d);
      if (!u || !l) {
        continue;  // not a directory on both sides: nothing to merge
      }
      if (int rc = make_merged(o_.format, u.get(), l.get()); rc != 0) {
        errno = -rc;
        return sys_error("turning the upper layer's " + d + " into a merged directory");
      }
    }
    return {};
  }

  // Removes a committed change from the upper layer: the entry, its whiteout, its origin record;
  // a directory only once nothing but the layer's bookkeeping is left in it.
  void drop_from_upper(const std::string& path) {
    auto [dir, base] = split_path(path);
    UniqueFd udir = open_dir_at(upper_, dir);
    if (!udir) {
      return;
    }
    if (o_.format == LayerFormat::CordonFs) {
      ::unlinkat(udir.get(), whiteout_name(base).c_str(), 0);
      ::unlinkat(udir.get(), origin_name(base).c_str(), 0);
    }
    struct stat st {};
    if (!lstat_at(udir.get(), base, &st)) {
      return;
    }
    if (!S_ISDIR(st.st_mode)) {
      ::unlinkat(udir.get(), base.c_str(), 0);
      return;
    }
    UniqueFd d(open_beneath(udir.get(), base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
    int err = 0;
    for (const auto& n : d ? list_dir(d.get(), &err) : std::vector<std::string>{"?"}) {
      struct stat cst {};
      std::string target;
      if (!lstat_at(d.get(), n, &cst) ||
          classify_upper(o_.format, d.get(), n, cst, &target) != UpperEntry::Internal) {
        return;  // held-back changes live in it
      }
    }
    remove_tree_at(udir.get(), base);
  }

  Status remove_staging() {
    for (size_t i = 0; i < journal_.stages.size(); ++i) {
      UniqueFd parent = open_dir_at(lower_, journal_.stages[i]);
      if (!parent) {
        continue;
      }
      if (int rc = remove_tree_at(parent.get(), staging_); rc != 0) {
        errno = -rc;
        return sys_error("removing the staging directory " + staging_);
      }
    }
    return {};
  }

  Status remove_journal() {
    std::string path = o_.session_dir + "/" + kCommitJournal;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return sys_error("removing the commit journal " + path);
    }
    UniqueFd d(::open(o_.session_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (d) {
      (void)::fsync(d.get());
    }
    return {};
  }

  int lower_, upper_;
  const CommitOptions& o_;
  std::string staging_;
  const CommitPlan* plan_ = nullptr;
  std::map<std::string, std::vector<size_t>> children_;  // covered entries by their directory
  UniqueFd journal_fd_;
  Journal journal_;
  std::vector<UniqueFd> stages_;
  std::map<uint64_t, size_t> stage_by_mount_;
  std::set<std::string> touched_;
  size_t applied_ = 0;
};

Result<UniqueFd> open_upper(const std::string& upper) {
  UniqueFd u = open_root(upper);
  if (!u) {
    return sys_error("opening the upper layer " + upper);
  }
  return u;
}

// recover_commit on the workspace open as `lower_fd`.
Result<std::string> recover_at(int lower_fd, int upper_fd, const CommitOptions& opts) {
  std::string path = opts.session_dir + "/" + kCommitJournal;
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) {
      return std::string();
    }
    return sys_error("opening the commit journal " + path);
  }
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::pread(fd.get(), buf, sizeof buf, static_cast<off_t>(text.size()));
    if (n < 0) {
      return sys_error("reading the commit journal " + path);
    }
    if (n == 0) {
      break;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  auto journal = parse_journal(text);
  if (!journal.ok()) {
    return std::move(journal).error().with_context(path);
  }
  Transaction t(lower_fd, upper_fd, opts);
  return t.recover(std::move(fd), std::move(*journal));
}

}  // namespace

std::string staging_dir_name(const std::string& session_id) {
  return ".cordon-commit-" + session_id;
}

Result<std::string> recover_commit(const std::string& lower, const std::string& upper,
                                   const CommitOptions& opts) {
  if (::access((opts.session_dir + "/" + kCommitJournal).c_str(), F_OK) != 0 && errno == ENOENT) {
    return std::string();  // nothing to recover: the workspace need not even be there
  }
  ASSIGN_OR_RETURN(UniqueFd l, open_workspace(lower, opts.workspace_id));
  ASSIGN_OR_RETURN(UniqueFd u, open_upper(upper));
  return recover_at(l.get(), u.get(), opts);
}

Result<CommitReport> commit_layers(const std::string& lower, const std::string& upper,
                                   const CommitOptions& opts) {
  CommitReport report;
  // One open of the workspace for everything below: a name resolved twice could be swapped.
  ASSIGN_OR_RETURN(UniqueFd l, open_workspace(lower, opts.workspace_id));
  ASSIGN_OR_RETURN(UniqueFd u, open_upper(upper));
  ASSIGN_OR_RETURN(report.recovered, recover_at(l.get(), u.get(), opts));
  ASSIGN_OR_RETURN(std::vector<Change> changes,
                   diff_layers(l.get(), lower, upper, opts.policy, opts.format));
  ASSIGN_OR_RETURN(CommitPlan plan, plan_commit(l.get(), u.get(), lower, std::move(changes), opts));
  for (const auto& e : plan.entries) {
    if (e.state == EntryState::Held) {
      report.held.push_back({e.change.path, e.why});
    }
  }
  if (!plan.conflicts.empty()) {
    report.conflicts = std::move(plan.conflicts);
    return report;
  }
  for (const auto& e : plan.entries) {
    if (e.state == EntryState::Apply) {
      report.applied.push_back(e.change);
      for (auto& w : review_warnings(e.change, l.get(), u.get())) {
        report.warnings.push_back(e.change.path + ": " + w);
      }
    }
  }
  if (report.applied.empty()) {
    return report;
  }
  Transaction t(l.get(), u.get(), opts);
  TRY(t.run(plan, &report));
  return report;
}

}  // namespace cordon::fusefs
