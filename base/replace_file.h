// replace_file: a file's new content in one rename, so that a reader or a crash sees the old
// content or the new one, never a part of either.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "base/result.h"

namespace cordon {

struct ReplaceOptions {
  mode_t mode = 0644;  // the new file's permissions (umask does not apply)
  // The new file's owner, for a file cordon running as root rewrites for a user; -1 keeps the
  // creator's.
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
};

// Writes `data` to a temporary file next to `path` ("PATH.PID.tmp", created with O_EXCL and
// O_NOFOLLOW, so nothing planted at that name is written through), fsyncs and closes it, and
// renames it over `path`. On failure the temporary file is removed, `path` is left as it was, and
// the error names the call and the file.
Status replace_file(const std::string& path, std::string_view data,
                    const ReplaceOptions& opts = {});

}  // namespace cordon
