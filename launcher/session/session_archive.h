// A finished session as one tar archive (`cordon export`) and back (`cordon import`).
//
// Layout, in this order (import refuses anything else):
//   manifest.json            first entry: format, version, session id, cordon version, chain head
//   report.html              the `cordon report` page, for reading without cordon
//   session/                 the record: policy.json, policy.requested.json, events.jsonl,
//                            events.jsonl.head, summary.json, cow.json, cordon-fs.log
//   session/upper/...        the copy-on-write layer as cordon-fs keeps it (".wh." whiteouts,
//   session/snapshots/...    opaque markers and origin records are plain files), user.* xattrs
//
// An archive is hostile input: import writes every entry itself, relative to directory fds it
// opened with O_NOFOLLOW, into a temporary directory of the sessions root, and renames that into
// place only once every entry passed; any refusal removes it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

struct archive;

namespace cordon::launcher {

inline constexpr const char* kArchiveFormat = "cordon-session";
inline constexpr int kArchiveVersion = 1;
// Written into an imported session: where it came from. commit refuses such a session, since the
// workspace path in its record names a directory of another machine.
inline constexpr const char* kImportedMarker = "imported.json";

// The record's files (session.h names them): the only entries of session/ besides the layers.
inline constexpr const char* kRecordFiles[] = {
    "policy.json", "policy.requested.json", "events.jsonl", "events.jsonl.head", "summary.json",
    "cow.json",    "cordon-fs.log"};
inline constexpr const char* kLayerDirs[] = {"upper", "snapshots"};
inline bool is_record_file(std::string_view name) {
  for (const char* f : kRecordFiles) {
    if (name == f) {
      return true;
    }
  }
  return false;
}

// Writes session `id` (a full id under `root`) to `out_fd`; zstd-compressed when `zstd`. Refuses a
// session without summary.json or whose cordon still runs, and a layer in the kernel overlayfs
// format (its whiteouts are device nodes, which import refuses).
Status export_session(const std::string& root, const std::string& id, int out_fd, bool zstd);

struct ImportLimits {
  uint64_t max_entries = 200000;    // entries of the archive, directories included
  uint64_t max_bytes = 8ull << 30;  // file contents, as extracted
  static constexpr size_t kMaxPath = 4096;
  static constexpr int kMaxDepth = 128;  // path components
};

struct Imported {
  std::string id;
  std::string original_id;
  uint64_t entries = 0;
  uint64_t bytes = 0;
};

// Reads an archive from `a` (opened for reading by the caller) into the sessions root `root_fd` as
// session `as_id` ("" = the id in the manifest). Nothing is left under root_fd on error.
Result<Imported> import_archive(int root_fd, struct archive* a, const std::string& as_id,
                                const ImportLimits& limits, const std::string& source);
// The same from a file ("-" = stdin) or from memory (the fuzz target).
Result<Imported> import_archive_file(int root_fd, const std::string& path, const std::string& as_id,
                                     const ImportLimits& limits);
Result<Imported> import_archive_memory(int root_fd, const void* data, size_t size,
                                       const std::string& as_id, const ImportLimits& limits);

}  // namespace cordon::launcher
