// Reading an upper layer in either on-disk format a cow session can leave: cordon-fs's (".wh."
// names, layer_names.h) or the kernel overlayfs fallback's (character-device 0/0 whiteouts,
// "user.overlay.opaque" / "trusted.overlay.opaque" xattrs). diff and commit see both through
// these few questions, so no session is left unreviewable.
#pragma once

#include <sys/stat.h>

#include <string>
#include <string_view>

#include "base/result.h"

namespace cordon::fusefs {

enum class LayerFormat {
  CordonFs,  // cordon-fs: .wh.NAME whiteouts, .wh..wh..opq markers, origin records
  Overlay,   // kernel overlayfs (userxattr): 0/0 char-device whiteouts, *.overlay.opaque xattrs
};

// The name of a format as the session record writes it ("cordon-fs" | "overlay"), and back.
const char* layer_format_name(LayerFormat f);
Result<LayerFormat> parse_layer_format(std::string_view backend);

// An entry of an upper directory, as diff and commit must read it.
enum class UpperEntry {
  User,      // a file, directory, link... of the merged view
  Whiteout,  // deletes the lower entry `target` (whiteout_target)
  Internal,  // the layer's own bookkeeping (cordon-fs markers, origin records, temp files)
};

// Classifies the entry `name` (lstat'ed as `st`) of the upper directory `dirfd`; for a whiteout,
// *target is the name it deletes. An overlayfs xattr whiteout (an empty file with
// *.overlay.whiteout, in a directory whose opaque xattr is "x") is recognised as one too.
UpperEntry classify_upper(LayerFormat f, int dirfd, const std::string& name, const struct stat& st,
                          std::string* target);

// Whether the upper directory `dirfd` hides the lower directory beneath it entirely.
bool is_opaque_dir(LayerFormat f, int dirfd);

// Overlayfs features cordon cannot read back (redirect_dir, metacopy: the fallback mounts with
// userxattr, which refuses both, so a layer that has them was not written by cordon): an error
// naming the entry when `fd` (an open file or directory of the layer) carries one.
Status check_overlay_features(LayerFormat f, int fd, const std::string& rel);
// The same for the entry `name` of the upper directory `dirfd`, opened only when it lists one of
// those xattrs (one listxattr instead of an open and four reads: diff asks this of every file of
// the layer).
Status check_overlay_features_at(LayerFormat f, int dirfd, const std::string& name,
                                 const std::string& rel);

// Whether an xattr of the upper layer may go to the real workspace: user.* only, never the
// layer's own user.overlay.* (nor security.*, trusted.*, system.*: capabilities, ACLs and
// labels are the real tree's to decide, not the sandbox's).
bool xattr_commits(std::string_view name);

// Turns the opaque upper directory `dirfd` into a merged one over `lower_dirfd`: every lower name
// the upper does not have gets a whiteout, then the opaque mark goes. Used after a partial commit,
// when the real directory now holds what was committed. 0 or -errno.
int make_merged(LayerFormat f, int dirfd, int lower_dirfd);

// Deletes `name` in the merged view: a whiteout of the format in the upper directory dirfd.
int make_whiteout_at(LayerFormat f, int dirfd, const std::string& name);

}  // namespace cordon::fusefs
