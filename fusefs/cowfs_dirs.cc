// Directories: the merged listing of both layers, opendir/readdir(plus)/releasedir.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fusefs/cowfs_impl.h"
#include "fusefs/kernel/passthrough.h"
#include "fusefs/layer_names.h"
#include "fusefs/safe_io.h"

namespace cordon::fusefs {

void CowFs::Impl::build_dir(CowFs* self, DirHandle* dh, const InodeView& v, int* err) {
  dh->entries.clear();
  dh->entries.push_back({".", v.node->id, DT_DIR, {}});
  dh->entries.push_back({"..", 1, DT_DIR, {}});
  std::set<std::string> seen;
  std::string dir_path = self->table_.path_of(v.node);
  auto visible = [&](const std::string& n) {
    return self->access_.visible(dir_path.empty() ? n : dir_path + "/" + n);
  };
  auto add_from = [&](int layer_fd, bool is_upper) {
    // "." relative to the directory's own O_PATH fd: the directory itself, without the path
    // walk through /proc/self/fd that reopen_fd takes (once per listing, twice when merged).
    UniqueFd d(::openat(layer_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!d) {
      *err = errno;
      return;
    }
    struct stat dst;
    stat_fd(d.get(), &dst);
    DIR* dp = ::fdopendir(d.release());
    if (dp == nullptr) {
      *err = errno;
      return;
    }
    while (dirent* de = ::readdir(dp)) {
      std::string n = de->d_name;
      if (n == "." || n == "..") {
        continue;
      }
      if (is_reserved_name(n)) {
        if (is_upper) {
          std::string_view t = whiteout_target(n);
          if (!t.empty()) {
            seen.insert(std::string(t));  // deleted: hides the lower entry
          }
        }
        continue;
      }
      if (!seen.insert(n).second) {
        continue;
      }
      if (!visible(n)) {
        continue;
      }
      DevIno key{dst.st_dev, de->d_ino};
      dh->entries.push_back({n, self->table_.number_for(key), de->d_type, key});
    }
    ::closedir(dp);
  };
  if (v.upper >= 0) {
    add_from(v.upper, true);
  }
  if (v.lower >= 0 && !v.opaque) {
    add_from(v.lower, false);
  }
}

void CowFs::Impl::op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  CowFs* self = fs(req);
  serve(
      req,
      [&] {
        InodeView v = self->table_.view(ino);
        if (v.node == nullptr) {
          return -ENOENT;
        }
        if (v.stale) {
          return -ESTALE;
        }
        auto dh = std::make_unique<DirHandle>();
        dh->node = v.node;
        self->table_.add_handle(v.node);
        fi->fh = reinterpret_cast<uint64_t>(dh.release());
        return 0;
      },
      [&](int rc) {
        if (rc != 0) {
          fuse_reply_err(req, -rc);
          return;
        }
        fi->keep_cache = self->config_.direct ? 0 : 1;
        fi->cache_readdir = self->config_.direct ? 0 : 1;
        if (fuse_reply_open(req, fi) == -ENOENT) {
          auto* dh = reinterpret_cast<DirHandle*>(fi->fh);
          self->table_.drop_handle(dh->node);
          delete dh;
        }
      });
}

void CowFs::Impl::do_readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                                    fuse_file_info* fi, bool plus) {
  CowFs* self = Impl::fs(req);
  auto* dh = reinterpret_cast<DirHandle*>(fi->fh);
  std::vector<char> buf(size);
  size_t used = 0;
  serve(
      req,
      [&] {
        InodeView v = self->table_.view(ino);
        if (v.stale) {
          return -ESTALE;
        }
        if (off == 0 || dh->entries.empty()) {
          int err = 0;
          Impl::build_dir(self, dh, v, &err);
          if (err != 0) {
            return -err;
          }
        }
        // Offsets are indexes into the listing taken at offset 0: stable while the handle lives.
        // The directory's path is walked once per request, not once per entry.
        std::string dir_path = plus ? self->table_.path_of(v.node) : std::string();
        auto child_of = [](const std::string& dir, const std::string& name) {
          return dir.empty() ? name : dir + "/" + name;
        };
        for (size_t i = static_cast<size_t>(off); i < dh->entries.size(); i++) {
          const DirEntry& de = dh->entries[i];
          size_t rem = buf.size() - used;
          size_t n;
          if (plus) {
            fuse_entry_param e;
            std::memset(&e, 0, sizeof(e));
            bool looked_up = false;
            // A name the kernel holds already (looked up before: `git status` stats every file,
            // then lists every directory) keeps its dentry and attributes: listed without them,
            // no host stat and no lookup count.
            bool dot = de.name == "." || de.name == "..";
            uint64_t held = dot ? 0 : self->table_.held_child(v.node, de.name, de.key);
            if (held == 0 && !dot && self->access_.readable(child_of(dir_path, de.name)) &&
                Impl::lookup_entry(self, v, de.name, &e) == 0) {
              looked_up = true;
            } else {
              // Listed without attributes (names the kernel holds, dot entries, read-denied names
              // shown as EACCES): nodeid 0 tells the kernel not to make or refresh a dentry from
              // it.
              e.attr.st_ino = held != 0 ? held : de.ino;
              e.attr.st_mode = static_cast<mode_t>(de.type) << 12;
            }
            n = fuse_add_direntry_plus(req, buf.data() + used, rem, de.name.c_str(), &e,
                                       static_cast<off_t>(i + 1));
            if (n > rem) {
              if (looked_up) {
                self->table_.forget(e.ino, 1);  // not sent: the kernel never saw this lookup
              }
              break;
            }
          } else {
            struct stat st {};
            st.st_ino = de.ino;
            st.st_mode = static_cast<mode_t>(de.type) << 12;
            n = fuse_add_direntry(req, buf.data() + used, rem, de.name.c_str(), &st,
                                  static_cast<off_t>(i + 1));
            if (n > rem) {
              break;
            }
          }
          used += n;
        }
        return 0;
      },
      [&](int rc) {
        if (rc != 0) {
          fuse_reply_err(req, -rc);
        } else {
          fuse_reply_buf(req, buf.data(), used);
        }
      });
}

void CowFs::Impl::op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                             fuse_file_info* fi) {
  do_readdir_common(req, ino, size, off, fi, false);
}

void CowFs::Impl::op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                                 fuse_file_info* fi) {
  do_readdir_common(req, ino, size, off, fi, true);
}

void CowFs::Impl::op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  auto* dh = reinterpret_cast<DirHandle*>(fi->fh);
  serve(
      req,
      [&] {
        fs(req)->table_.drop_handle(dh->node);
        delete dh;
        return 0;
      },
      [&](int rc) { reply_err(req, rc); });
}

void CowFs::Impl::op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  serve(
      req,
      [&] {
        InodeView v = fs(req)->table_.view(ino);
        if (v.upper < 0) {
          return 0;
        }
        UniqueFd d(::openat(v.upper, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        return (d && ::fsync(d.get()) == 0) ? 0 : -errno;
      },
      [&](int rc) { reply_err(req, rc); });
}

}  // namespace cordon::fusefs
