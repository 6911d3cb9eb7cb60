// A finished session as one tar archive (`cordon export`) and back (`cordon import`).
//
// Layout, in this order (import refuses anything else):
//   manifest.json            first entry: format, version, session id, cordon version, chain head
//   report.html              the `cordon report` page, for reading without cordon
//   session/                 the record: policy.json, policy.requested.json, events.jsonl,
//                            events.jsonl.head, summary.json, cow.json, cordon-fs.log
//   session/upper/...        the copy-on-write layer in the format the session ran with, named
//   session/snapshots/...    by the manifest's layer_format: "cordon-fs" (".wh." whiteouts,
//                            opaque markers and origin records are plain files) or "overlay"
//                            (whiteouts are character devices 0:0, an opaque directory carries
//                            user.overlay.opaque "y"); user.* xattrs
//
// An archive is hostile input: import writes every entry itself, relative to directory fds it
// opened with O_NOFOLLOW, into a temporary directory of the sessions root, and renames that into
// place only once every entry passed; any refusal removes it. The workspace the archive's
// cow.json names is never trusted: it is kept as the session's origin, for display, and the
// imported session reviews against the directory given to import (or against nothing).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

struct archive;

namespace cordon::launcher {

inline constexpr const char* kArchiveFormat = "cordon-session";
inline constexpr int kArchiveVersion = 1;
// Written into an imported session: where it came from ("from", "archive", "origin_workspace")
// and the workspace it is bound to ("workspace": the directory given to `cordon import
// --workspace`, or null). Its presence makes the review commands take the workspace from here,
// never from cow.json: with none bound, diff shows the layer against nothing and commit refuses.
inline constexpr const char* kImportedMarker = "imported.json";
inline constexpr const char* kCordonFsFormat = "cordon-fs";
inline constexpr const char* kOverlayFormat = "overlay";

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
// session without summary.json or whose cordon still runs. A layer of the kernel overlayfs
// fallback goes in its own format: a whiteout (a 0:0 character device, or an xattr whiteout) as a
// 0:0 character device entry, an opaque directory (user. or trusted.overlay.opaque "y") with
// user.overlay.opaque "y"; a layer using redirect_dir or metacopy is refused.
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
  bool has_layer = false;        // the archive's session has a cow record (cow.json)
  std::string origin_workspace;  // as the archive's cow.json named it ("" when it has none)
  uint64_t stale_removed = 0;    // ".import-*" directories of killed imports removed first
  uint64_t entries = 0;
  uint64_t bytes = 0;
};

// Reads an archive from `a` (opened for reading by the caller) into the sessions root `root_fd` as
// session `as_id` ("" = the id in the manifest), bound to `workspace` (an absolute directory the
// caller checked, or "" for none). Nothing is left under root_fd on error.
//
// Each import works in a ".import-*" directory of the root that it holds an flock(2) on; before
// making its own it removes those no live import holds (one killed midway), under an exclusive
// flock of the root itself so that a directory just made is never taken for a stale one.
Result<Imported> import_archive(int root_fd, struct archive* a, const std::string& as_id,
                                const ImportLimits& limits, const std::string& source,
                                const std::string& workspace);
// The same from a file ("-" = stdin) or from memory (the fuzz target; no workspace).
Result<Imported> import_archive_file(int root_fd, const std::string& path, const std::string& as_id,
                                     const ImportLimits& limits, const std::string& workspace);
Result<Imported> import_archive_memory(int root_fd, const void* data, size_t size,
                                       const std::string& as_id, const ImportLimits& limits);

}  // namespace cordon::launcher
