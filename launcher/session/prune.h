// Session retention: `cordon prune` and the bounded pass `cordon run` makes at start. Which
// sessions' records go, and removing them without following a symlink or crossing a mount.
#pragma once

#include <chrono>
#include <cstddef>
#include <iosfwd>
#include <optional>
#include <string>

namespace cordon::launcher {

struct PruneOptions {
  std::optional<std::chrono::seconds> older_than;  // ended (last written) at least this long ago
  std::optional<size_t> keep;                      // never one of the N newest sessions
  bool dry_run = false;
  bool force = false;  // also sessions whose copy-on-write changes are pending
};

// Without --older-than and --keep, prune takes what ended more than this long ago.
inline constexpr std::chrono::hours kDefaultPruneAge{24 * 7};

// `cordon prune` on the sessions under `root` (commands.h has the CLI's entry point). Running
// sessions are never selected; pending changes are kept unless `force`. Exit 0 done (nothing
// selected included), 1 refused (pending changes kept), 125 failed.
int prune_command(const std::string& root, const PruneOptions& opts, std::ostream& out,
                  std::ostream& err);

// The retention `cordon run` applies at start: finished sessions without pending changes whose
// record was last written more than $CORDON_RETENTION ago (a duration; default
// kDefaultRetention; 0 turns it off) are removed, the oldest first, at most kRetentionBatch per
// run, and the whole pass at most once per kRetentionEvery (a stamp file in the root). Silent:
// a failure only leaves a record for the next pass or `cordon prune`.
inline constexpr std::chrono::hours kDefaultRetention{24 * 30};
inline constexpr size_t kRetentionBatch = 16;
inline constexpr std::chrono::minutes kRetentionEvery{60};
void apply_retention(const std::string& root);

}  // namespace cordon::launcher
