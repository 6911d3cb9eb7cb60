#include "launcher/session/session_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fusefs/layer_format.h"
#include "launcher/commands/report/report_cmd.h"
#include "launcher/session/session.h"
#include "launcher/session/session_store.h"

namespace cordon::launcher {
namespace {

using fusefs::LayerFormat;

constexpr int kExportDepth = 256;
static_assert(std::string_view(kRecordFiles[1]) == kRequestedPolicy);

struct ArchiveFree {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};
using EntryPtr = std::unique_ptr<archive_entry, EntryFree>;

Error archive_error(struct archive* a, const std::string& what) {
  const char* msg = archive_error_string(a);
  return make_error(what + ": " + (msg != nullptr ? msg : "archive error"));
}

class Writer {
 public:
  explicit Writer(struct archive* a) : a_(a) {}

  Status header(const std::string& path, mode_t type, mode_t perm, int64_t size, time_t mtime,
                const std::string& link = {}) {
    EntryPtr e(archive_entry_new());
    archive_entry_set_pathname(e.get(), path.c_str());
    archive_entry_set_filetype(e.get(), type);
    archive_entry_set_perm(e.get(), perm & 0777);
    archive_entry_set_size(e.get(), size);
    archive_entry_set_mtime(e.get(), mtime, 0);
    if (type == AE_IFLNK) {
      archive_entry_set_symlink(e.get(), link.c_str());
    }
    for (const auto& [name, value] : xattrs_) {
      archive_entry_xattr_add_entry(e.get(), name.c_str(), value.data(), value.size());
    }
    xattrs_.clear();
    if (archive_write_header(a_, e.get()) != ARCHIVE_OK) {
      return archive_error(a_, "writing " + path);
    }
    return {};
  }
  Status data(const std::string& path, const void* buf, size_t n) {
    if (archive_write_data(a_, buf, n) != static_cast<la_ssize_t>(n)) {
      return archive_error(a_, "writing " + path);
    }
    return {};
  }
  Status text(const std::string& path, const std::string& body) {
    TRY(header(path, AE_IFREG, 0600, static_cast<int64_t>(body.size()), ::time(nullptr)));
    return data(path, body.data(), body.size());
  }
  // Copies the open regular file `fd` (st: its fstat) as `path`; it must not change size meanwhile.
  Status file(const std::string& path, int fd, const struct stat& st) {
    TRY(header(path, AE_IFREG, st.st_mode, st.st_size, st.st_mtim.tv_sec));
    char buf[1 << 16];
    int64_t left = st.st_size;
    while (left > 0) {
      ssize_t n = ::read(fd, buf, static_cast<size_t>(std::min<int64_t>(left, sizeof buf)));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        return n < 0 ? sys_error("reading " + path) : make_error(path + " shrank while exported");
      }
      TRY(data(path, buf, static_cast<size_t>(n)));
      left -= n;
    }
    return {};
  }
  // The user.* xattrs of `fd`, attached to the next header: the cow view keeps them when the
  // policy's filesystem.xattrs allows. Other namespaces are the host's, never carried; of an
  // overlay layer, the overlay's own (user.overlay.*) are not either: export_tree restates the
  // one that matters, the opaque mark.
  Status take_xattrs(int fd, const std::string& path, LayerFormat format) {
    char names[1 << 16];
    ssize_t n = ::flistxattr(fd, names, sizeof names);
    if (n < 0) {
      return errno == ENOTSUP ? Status{} : sys_error("listing xattrs of " + path);
    }
    for (ssize_t i = 0; i < n;) {
      std::string name(names + i);
      i += static_cast<ssize_t>(name.size()) + 1;
      if (!name.starts_with("user.") ||
          (format == LayerFormat::Overlay && name.starts_with("user.overlay."))) {
        continue;
      }
      std::string value(1 << 16, '\0');
      ssize_t v = ::fgetxattr(fd, name.c_str(), value.data(), value.size());
      if (v < 0) {
        return sys_error("reading xattr " + name + " of " + path);
      }
      value.resize(static_cast<size_t>(v));
      xattrs_.emplace_back(std::move(name), std::move(value));
    }
    return {};
  }
  void add_xattr(std::string name, std::string value) {
    xattrs_.emplace_back(std::move(name), std::move(value));
  }

 private:
  struct archive* a_;
  std::vector<std::pair<std::string, std::string>> xattrs_;
};

// Writes the tree under `dir_fd` as `prefix`/..., names sorted so an archive is reproducible. An
// overlay layer's whiteouts and opaque marks go in the one form import accepts and an unprivileged
// importer can make again: a 0:0 character device, user.overlay.opaque "y".
Status export_tree(Writer& w, int dir_fd, const std::string& prefix, int depth,
                   LayerFormat format) {
  if (depth > kExportDepth) {
    return make_error(prefix + ": deeper than " + std::to_string(kExportDepth) + " levels");
  }
  int dup_fd = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) {
    return sys_error("dup " + prefix);
  }
  DIR* d = ::fdopendir(dup_fd);
  if (d == nullptr) {
    ::close(dup_fd);
    return sys_error("opendir " + prefix);
  }
  std::vector<std::string> names;
  while (dirent* de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n != "." && n != "..") {
      names.push_back(std::move(n));
    }
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = prefix + "/" + name;
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return sys_error("stat " + path);
    }
    if (format == LayerFormat::Overlay) {
      std::string target;
      if (fusefs::classify_upper(format, dir_fd, name, st, &target) ==
          fusefs::UpperEntry::Whiteout) {
        TRY(w.header(path, AE_IFCHR, 0600, 0, st.st_mtim.tv_sec));
        continue;
      }
    }
    if (S_ISLNK(st.st_mode)) {
      std::string target(4097, '\0');
      ssize_t n = ::readlinkat(dir_fd, name.c_str(), target.data(), target.size());
      if (n < 0 || n > 4096) {
        return n < 0 ? sys_error("readlink " + path) : make_error(path + ": link target too long");
      }
      target.resize(static_cast<size_t>(n));
      TRY(w.header(path, AE_IFLNK, 0777, 0, st.st_mtim.tv_sec, target));
      continue;
    }
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
      return make_error(path + " is neither a file, a directory, a symlink nor a whiteout",
                        "the program left a device node, FIFO or socket in its layer; discard "
                        "the session or remove it from the layer by hand");
    }
    UniqueFd fd(::openat(
        dir_fd, name.c_str(),
        O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0)));
    if (!fd) {
      return sys_error("open " + path);
    }
    if (::fstat(fd.get(), &st) != 0) {
      return sys_error("stat " + path);
    }
    TRY(fusefs::check_overlay_features(format, fd.get(), path));
    TRY(w.take_xattrs(fd.get(), path, format));
    if (S_ISDIR(st.st_mode)) {
      if (format == LayerFormat::Overlay && fusefs::is_opaque_dir(format, fd.get())) {
        w.add_xattr("user.overlay.opaque", "y");
      }
      TRY(w.header(path, AE_IFDIR, st.st_mode, 0, st.st_mtim.tv_sec));
      TRY(export_tree(w, fd.get(), path, depth + 1, format));
    } else {
      TRY(w.file(path, fd.get(), st));
    }
  }
  return {};
}

}  // namespace

Status export_session(const std::string& root, const std::string& id, int out_fd, bool zstd) {
  ASSIGN_OR_RETURN(UniqueFd root_fd, store::open_root(root));
  ASSIGN_OR_RETURN(UniqueFd dir, store::open_session_dir(root_fd.get(), id));
  auto summary_text = store::read_file(dir.get(), "summary.json", 1 << 20);
  if (!summary_text.ok()) {
    return make_error("session " + id + " has no end recorded (summary.json)",
                      "only finished sessions can be exported");
  }
  {
    // A lock on a duplicate would last as long as that fd: take it on a fresh open of the dir.
    ASSIGN_OR_RETURN(UniqueFd probe, store::open_session_dir(root_fd.get(), id));
    if (!store::try_lock_session(probe.get())) {
      return make_error("session " + id + " is still running",
                        "only finished sessions can be exported");
    }
  }
  LayerFormat format = LayerFormat::CordonFs;
  if (auto cow = store::read_file(dir.get(), "cow.json", 1 << 16); cow.ok()) {
    auto j = nlohmann::json::parse(*cow, nullptr, false);
    auto f = fusefs::parse_layer_format(j.is_object() && j.contains("backend") &&
                                                j["backend"].is_string()
                                            ? j["backend"].get<std::string>()
                                            : std::string());
    if (!f.ok()) {
      return std::move(f).error().with_context("session " + id + ": cow.json");
    }
    format = *f;
  }
  nlohmann::json summary = nlohmann::json::parse(*summary_text, nullptr, false);
  std::string head;
  if (summary.is_object() && summary.contains("record") && summary["record"].is_object()) {
    const auto& rec = summary["record"];
    if (rec.contains("chain") && rec["chain"].is_object() && rec["chain"].contains("head") &&
        rec["chain"]["head"].is_string()) {
      head = rec["chain"]["head"].get<std::string>();
    }
  }

  std::ostringstream report;
  ReportOptions ro;
  ro.id = id;
  ro.output = "-";
  if (report_command(root, ro, report) != 0) {
    return make_error("session " + id + ": its report page could not be made");
  }

  std::unique_ptr<struct archive, ArchiveFree> a(archive_write_new());
  if (!a || archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      (zstd && archive_write_add_filter_zstd(a.get()) != ARCHIVE_OK) ||
      archive_write_open_fd(a.get(), out_fd) != ARCHIVE_OK) {
    return archive_error(a.get(), "starting the archive");
  }
  Writer w(a.get());
  nlohmann::json manifest = {{"format", kArchiveFormat},
                             {"version", kArchiveVersion},
                             {"session", id},
                             {"cordon_version", CORDON_VERSION},
                             {"chain_head", head},
                             {"layer_format", fusefs::layer_format_name(format)}};
  TRY(w.text("manifest.json", manifest.dump(2) + "\n"));
  TRY(w.text("report.html", report.str()));
  TRY(w.header("session", AE_IFDIR, 0700, 0, ::time(nullptr)));
  for (const char* name : kRecordFiles) {
    auto fd = store::open_file(dir.get(), name);
    if (!fd.ok()) {
      if (fd.error().code == ENOENT) {
        continue;
      }
      return std::move(fd).error().with_context("session " + id);
    }
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) {
      return sys_error(std::string("stat ") + name);
    }
    TRY(w.file(std::string("session/") + name, fd->get(), st));
  }
  for (const char* name : kLayerDirs) {
    UniqueFd sub(::openat(dir.get(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) {
      if (errno == ENOENT) {
        continue;
      }
      return sys_error(std::string("open ") + name);
    }
    TRY(w.header(std::string("session/") + name, AE_IFDIR, 0700, 0, ::time(nullptr)));
    TRY(export_tree(w, sub.get(), std::string("session/") + name, 1, format));
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    return archive_error(a.get(), "finishing the archive");
  }
  return {};
}

}  // namespace cordon::launcher
