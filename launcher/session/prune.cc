// `cordon prune` and the retention pass of `cordon run`: selecting finished sessions by age and
// rank, keeping running sessions and pending changes, removing records within the state dir.
#include "launcher/session/prune.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <vector>

#include "fusefs/safe_io.h"
#include "launcher/diagnostics.h"
#include "launcher/run_options.h"
#include "launcher/session/session.h"
#include "launcher/session/session_state.h"
#include "launcher/session/session_store.h"
#include "launcher/session/session_text.h"
#include "launcher/sidecars/cowfs_sidecar.h"
#include "policy/loader.h"

namespace cordon::launcher {
namespace {

constexpr int kRefused = 1;
constexpr const char* kRetentionStamp = ".retention";

std::string age_text(int64_t seconds) {
  if (seconds < 60) {
    return "less than a minute";
  }
  if (seconds < 3600) {
    return std::to_string(seconds / 60) + " min";
  }
  if (seconds < 2 * 86400) {
    return std::to_string(seconds / 3600) + " h";
  }
  return std::to_string(seconds / 86400) + " days";
}

std::string size_text(const SessionState& s) {
  return (s.bytes_more ? "at least " : "") + text::size(s.bytes);
}

// Removes a session's record: its cordon-fs mount first if the daemon died and left it, then the
// tree, neither following a symlink nor entering a mount, opening up directories the program
// closed to their owner.
int remove_record(int root_fd, const std::string& root, const std::string& id) {
  detach_stale_cow_mount(root + "/" + id);
  return fusefs::remove_tree_at(root_fd, id, fusefs::kRemoveOneFilesystem | fusefs::kRemoveOpenUp);
}

}  // namespace

int prune_command(const std::string& root, const PruneOptions& opts, std::ostream& out,
                  std::ostream& err) {
  auto root_fd = store::open_root(root);
  if (!root_fd.ok()) {
    if (root_fd.error().code == ENOENT) {
      out << "cordon prune: no sessions yet (" << root << ")\n";
      return 0;
    }
    say_in(err, "prune", root_fd.error().to_string());
    return kExitCordonFailed;
  }
  auto ids = store::list_sessions(root_fd->get());
  if (!ids.ok()) {
    say_in(err, "prune", ids.error().to_string());
    return kExitCordonFailed;
  }
  std::optional<std::chrono::seconds> older_than = opts.older_than;
  if (!older_than && !opts.keep) {
    older_than = kDefaultPruneAge;
  }
  const int64_t now = std::time(nullptr);
  const std::string verb = opts.dry_run ? "would remove" : "removed";
  size_t removed = 0, kept_pending = 0, running = 0;
  uint64_t freed = 0;
  bool failed = false;
  for (size_t i = 0; i < ids->size(); ++i) {
    const std::string& id = (*ids)[i];
    if (opts.keep && ids->size() - i <= *opts.keep) {
      break;  // the N newest stay; ids are oldest first
    }
    // Held open (and so locked, when no live cordon held it) until the record is gone.
    auto dir = store::open_session_dir(root_fd->get(), id);
    if (!dir.ok()) {
      say_in(err, "prune", id + ": " + dir.error().to_string());
      failed = true;
      continue;
    }
    const SessionState state = read_session_state(dir->get(), root + "/" + id, true);
    const int64_t age = now - state.last_write;
    if (older_than && age < older_than->count()) {
      continue;
    }
    if (state.running) {
      ++running;
      continue;
    }
    std::string what = (state.ended ? "ended " : "stopped without recording its end ") +
                       age_text(age) + " ago, " + size_text(state);
    if (state.pending && !opts.force) {
      out << "cordon prune: kept " << id << " (" << what
          << "): its changes were never committed or discarded; review: cordon diff " << id
          << ", then cordon commit " << id << " or cordon discard " << id << " (or --force)\n";
      ++kept_pending;
      continue;
    }
    if (state.pending) {
      what += ", with uncommitted changes (--force)";
    }
    if (!opts.dry_run) {
      if (int rc = remove_record(root_fd->get(), root, id); rc != 0) {
        say_in(err, "prune",
               id + ": removing " + root + "/" + id + " stopped: " + std::strerror(-rc) +
                   (rc == -EXDEV || rc == -EBUSY ? " (a mount inside the record: unmount it first)"
                                                 : "") +
                   "; what is left stays");
        failed = true;
        continue;
      }
    }
    out << "cordon prune: " << verb << " " << id << " (" << what << ")\n";
    ++removed;
    freed += state.bytes;
  }
  out << "cordon prune: " << verb << " " << removed << " session" << (removed == 1 ? "" : "s");
  if (removed > 0) {
    out << " (" << text::size(freed) << ")";
  }
  if (kept_pending > 0) {
    out << "; kept " << kept_pending << " with pending changes";
  }
  if (running > 0) {
    out << "; " << running << " still running";
  }
  out << "\n";
  if (failed) {
    return kExitCordonFailed;
  }
  return kept_pending > 0 ? kRefused : 0;
}

int prune_command(const PruneOptions& opts) {
  return prune_command(sessions_root(), opts, std::cout, std::cerr);
}

void apply_retention(const std::string& root) {
  std::chrono::seconds keep_for = kDefaultRetention;
  if (const char* env = std::getenv("CORDON_RETENTION"); env != nullptr && *env != '\0') {
    auto d = policy::parse_duration(env);
    if (!d) {
      say("CORDON_RETENTION=" + text::one_line(env, 64) +
          " is not a duration (e.g. 30d, 12h; 0 keeps every session); old sessions were not "
          "pruned");
      return;
    }
    keep_for = std::chrono::duration_cast<std::chrono::seconds>(*d);
  }
  if (keep_for.count() == 0) {
    return;
  }
  auto root_fd = store::open_root(root);
  if (!root_fd.ok()) {
    return;
  }
  // One pass an hour at most: a stat on every other run.
  const int64_t now = std::time(nullptr);
  struct stat st;
  if (::fstatat(root_fd->get(), kRetentionStamp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      now - st.st_mtim.tv_sec < std::chrono::seconds(kRetentionEvery).count() &&
      st.st_mtim.tv_sec <= now) {
    return;
  }
  UniqueFd stamp(
      ::openat(root_fd->get(), kRetentionStamp, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!stamp || ::futimens(stamp.get(), nullptr) != 0) {
    return;
  }
  auto ids = store::list_sessions(root_fd->get());
  if (!ids.ok()) {
    return;
  }
  size_t removed = 0;
  for (size_t i = 0; i < ids->size() && i < 4 * kRetentionBatch && removed < kRetentionBatch; ++i) {
    const std::string& id = (*ids)[i];
    auto dir = store::open_session_dir(root_fd->get(), id);
    if (!dir.ok()) {
      continue;
    }
    SessionState s = read_session_state(dir->get(), root + "/" + id, false);
    if (s.running || s.pending || now - s.last_write < keep_for.count()) {
      continue;
    }
    if (remove_record(root_fd->get(), root, id) == 0) {
      ++removed;
    }
  }
}

}  // namespace cordon::launcher
