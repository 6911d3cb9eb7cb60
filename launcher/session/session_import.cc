#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fusefs/workspace_root.h"
#include "launcher/session/session_archive.h"
#include "launcher/session/session_store.h"

// The reader of `cordon import`: kept apart from the writer so the fuzz target links only this,
// the record reader and libarchive.
namespace cordon::launcher {
namespace {

constexpr size_t kManifestMax = 64 * 1024;
constexpr size_t kCowRecordMax = 64 * 1024;
constexpr std::string_view kTempPrefix = ".import-";

struct ReadFree {
  void operator()(struct archive* a) const { archive_read_free(a); }
};

Error archive_error(struct archive* a, const std::string& what) {
  const char* msg = archive_error_string(a);
  return make_error(what + ": " + (msg != nullptr ? msg : "archive error"));
}

}  // namespace

namespace {

// Removes the tree `name` under `dir_fd` without following a link; bounded by depth.
void remove_tree(int dir_fd, const std::string& name, int depth = 0) {
  if (::unlinkat(dir_fd, name.c_str(), 0) == 0 || errno == ENOENT) {
    return;
  }
  if (depth < ImportLimits::kMaxDepth + 4) {
    int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      DIR* d = ::fdopendir(fd);
      if (d != nullptr) {
        std::vector<std::string> names;
        while (dirent* de = ::readdir(d)) {
          if (std::string_view(de->d_name) != "." && std::string_view(de->d_name) != "..") {
            names.emplace_back(de->d_name);
          }
        }
        for (const auto& n : names) {
          remove_tree(::dirfd(d), n, depth + 1);
        }
        ::closedir(d);
      } else {
        ::close(fd);
      }
    }
  }
  ::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR);
}

// Removes the ".import-*" directories of `root_fd` that no import holds a lock on: those of
// imports killed midway. The caller holds the root's exclusive lock, so none is being made.
uint64_t remove_stale_imports(int root_fd) {
  int fd = ::openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (d == nullptr) {
    if (fd >= 0) {
      ::close(fd);
    }
    return 0;
  }
  std::vector<std::string> names;
  while (dirent* de = ::readdir(d)) {
    if (std::string_view(de->d_name).starts_with(kTempPrefix) && names.size() < 10000) {
      names.emplace_back(de->d_name);
    }
  }
  ::closedir(d);
  uint64_t removed = 0;
  for (const auto& name : names) {
    UniqueFd dir(::openat(root_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    // Held by a running import (its lock lasts as long as it does), or not a directory: left be.
    if (!dir || ::flock(dir.get(), LOCK_EX | LOCK_NB) != 0) {
      continue;
    }
    remove_tree(root_fd, name);
    ++removed;
  }
  return removed;
}

// Splits an archive path into components, or says why it is refused.
Result<std::vector<std::string>> split_path(std::string path, bool is_dir) {
  const std::string shown = path;
  if (path.empty() || path.size() > ImportLimits::kMaxPath) {
    return make_error("an entry has an empty or too long path");
  }
  if (path.front() == '/') {
    return make_error("entry \"" + shown + "\": absolute path");
  }
  if (is_dir && path.back() == '/') {
    path.pop_back();
  }
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    std::string part =
        path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part.empty() || part == "." || part == ".." || part.size() > 255) {
      return make_error("entry \"" + shown + "\": \"..\", \".\" or an empty component");
    }
    parts.push_back(std::move(part));
    if (slash == std::string::npos) {
      break;
    }
    start = slash + 1;
  }
  if (parts.size() > static_cast<size_t>(ImportLimits::kMaxDepth)) {
    return make_error("entry \"" + shown + "\": deeper than " +
                      std::to_string(ImportLimits::kMaxDepth) + " components");
  }
  return parts;
}

class Importer {
 public:
  Importer(int root_fd, struct archive* a, const ImportLimits& limits, const std::string& workspace)
      : root_fd_(root_fd), a_(a), limits_(limits), workspace_(workspace) {}
  ~Importer() {
    if (!tmp_name_.empty()) {
      tmp_.reset();
      remove_tree(root_fd_, tmp_name_);
    }
  }

  Result<Imported> run(const std::string& as_id, const std::string& source) {
    archive_entry* e = nullptr;
    int rc = archive_read_next_header(a_, &e);
    if (rc != ARCHIVE_OK) {
      return archive_error(a_, "not a cordon session archive");
    }
    TRY(read_manifest(e, as_id));
    TRY(make_temp());
    for (;;) {
      rc = archive_read_next_header(a_, &e);
      if (rc == ARCHIVE_EOF) {
        break;
      }
      if (rc != ARCHIVE_OK) {
        return archive_error(a_, "reading the archive");
      }
      TRY(entry(e));
    }
    TRY(finish(source));
    return out_;
  }

 private:
  Status read_manifest(archive_entry* e, const std::string& as_id) {
    const char* p = archive_entry_pathname(e);
    if (p == nullptr || std::string_view(p) != "manifest.json" ||
        archive_entry_filetype(e) != AE_IFREG || archive_entry_size(e) < 0 ||
        archive_entry_size(e) > static_cast<la_int64_t>(kManifestMax)) {
      return make_error("not a cordon session archive: the first entry is not manifest.json");
    }
    std::string text(static_cast<size_t>(archive_entry_size(e)), '\0');
    la_ssize_t n = archive_read_data(a_, text.data(), text.size());
    if (n != static_cast<la_ssize_t>(text.size())) {
      return archive_error(a_, "reading manifest.json");
    }
    auto m = nlohmann::json::parse(text, nullptr, false);
    if (!m.is_object() || m.value("format", std::string()) != kArchiveFormat ||
        !m.contains("version") || !m["version"].is_number_integer() || !m.contains("session") ||
        !m["session"].is_string()) {
      return make_error("not a cordon session archive: manifest.json lacks format/version/session");
    }
    if (m["version"].get<int64_t>() != kArchiveVersion) {
      return make_error("archive format version " + std::to_string(m["version"].get<int64_t>()) +
                        " is not one this cordon reads (" + std::to_string(kArchiveVersion) + ")");
    }
    out_.original_id = m["session"].get<std::string>();
    // Archives from before overlay layers were exported name no format: cordon-fs's.
    layer_format_ = m.value("layer_format", std::string(kCordonFsFormat));
    if (layer_format_ != kCordonFsFormat && layer_format_ != kOverlayFormat) {
      return make_error("the manifest's layer_format is neither \"cordon-fs\" nor \"overlay\"");
    }
    if (m.contains("chain_head") && m["chain_head"].is_string()) {
      chain_head_ = m["chain_head"].get<std::string>();
    }
    if (!store::is_session_id(out_.original_id)) {
      return make_error("the manifest's session id is not a valid session id");
    }
    out_.id = as_id.empty() ? out_.original_id : as_id;
    if (!store::is_session_id(out_.id)) {
      return make_error("\"" + out_.id + "\" is not a valid session id (YYYYMMDD-HHMMSS-xxxxxx)");
    }
    struct stat st {};
    if (::fstatat(root_fd_, out_.id.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      return make_error("session " + out_.id + " already exists",
                        "import it under another id with --as ID");
    }
    return {};
  }

  // Makes and locks this import's directory, after removing those of dead imports. The root's
  // lock (on an open of its own: a lock lives with its open file) covers the sweep and the
  // making, so the sweep never sees a directory made but not yet locked.
  Status make_temp() {
    UniqueFd root_lock(::openat(root_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root_lock) {
      return sys_error("open the sessions root");
    }
    int rc = 0;
    while ((rc = ::flock(root_lock.get(), LOCK_EX)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
      return sys_error("locking the sessions root");
    }
    out_.stale_removed = remove_stale_imports(root_fd_);
    std::random_device rd;
    for (int i = 0; i < 16; ++i) {
      std::string name = std::string(kTempPrefix) + std::to_string(rd());
      if (::mkdirat(root_fd_, name.c_str(), 0700) == 0) {
        tmp_name_ = name;
        tmp_.reset(
            ::openat(root_fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!tmp_) {
          return sys_error("open " + name);
        }
        if (::flock(tmp_.get(), LOCK_EX | LOCK_NB) != 0) {
          return sys_error("locking " + name);
        }
        return {};
      }
      if (errno != EEXIST) {
        return sys_error("creating a directory in the sessions root");
      }
    }
    return make_error("no free temporary name in the sessions root");
  }

  // Opens the directory holding parts[0..n-1] (under tmp_), never following a link.
  Result<UniqueFd> open_parent(const std::vector<std::string>& parts, const std::string& shown) {
    UniqueFd cur(::fcntl(tmp_.get(), F_DUPFD_CLOEXEC, 0));
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      UniqueFd next(
          ::openat(cur.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!next) {
        return make_error("entry \"" + shown +
                          "\": its directory is not an earlier directory entry (a link, a file, "
                          "or missing)");
      }
      cur = std::move(next);
    }
    return cur;
  }

  Status entry(archive_entry* e) {
    const char* p = archive_entry_pathname(e);
    const std::string path = p != nullptr ? p : "";
    const mode_t type = archive_entry_filetype(e);
    if (++out_.entries > limits_.max_entries) {
      return make_error("more than " + std::to_string(limits_.max_entries) + " entries",
                        "--max-entries raises the bound");
    }
    if (archive_entry_hardlink(e) != nullptr) {
      return make_error("entry \"" + path + "\": hard links are refused");
    }
    // The one device an overlay layer holds is its whiteout, a character device 0:0 (which
    // mknod(2) makes without privilege); any other device, a FIFO or a socket is refused.
    const bool whiteout = type == AE_IFCHR && layer_format_ == kOverlayFormat &&
                          archive_entry_rdev(e) == 0 && archive_entry_size(e) == 0;
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && !whiteout) {
      return make_error("entry \"" + path + "\": devices, FIFOs and sockets are refused",
                        layer_format_ == kOverlayFormat
                            ? "only an overlay whiteout (a character device 0:0) is carried"
                            : "");
    }
    const mode_t perm = archive_entry_perm(e);
    if ((perm & 07000) != 0) {
      return make_error("entry \"" + path + "\": setuid, setgid and sticky bits are refused");
    }
    ASSIGN_OR_RETURN(std::vector<std::string> parts, split_path(path, type == AE_IFDIR));
    std::string key;
    for (const auto& part : parts) {
      key += "/" + part;
    }
    if (!seen_.insert(key).second) {
      return make_error("entry \"" + path + "\" appears twice");
    }
    TRY(check_layout(parts, type, path));
    if (whiteout && parts.size() < 3) {
      return make_error("entry \"" + path + "\": a whiteout outside the layers is refused");
    }
    if (parts[0] == "report.html") {
      return skip_data(e, path);  // regenerated by `cordon report` from the record
    }
    ASSIGN_OR_RETURN(UniqueFd parent, open_parent(parts, path));
    const std::string& name = parts.back();
    if (whiteout) {
      if (archive_entry_xattr_count(e) != 0) {
        return make_error("entry \"" + path + "\": a whiteout carries no xattrs");
      }
      if (::mknodat(parent.get(), name.c_str(), S_IFCHR | 0600, makedev(0, 0)) != 0) {
        return sys_error("creating the whiteout " + path);
      }
      return {};
    }
    if (type == AE_IFDIR) {
      if (::mkdirat(parent.get(), name.c_str(), 0700) != 0) {
        return sys_error("creating " + path);
      }
      UniqueFd d(
          ::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!d) {
        return sys_error("open " + path);
      }
      TRY(set_xattrs(e, d.get(), path, /*dir=*/true));
      // The owner keeps write and search: later entries go inside.
      if (::fchmod(d.get(), (perm & 0777) | 0700) != 0) {
        return sys_error("chmod " + path);
      }
      return {};
    }
    if (type == AE_IFLNK) {
      const char* target = archive_entry_symlink(e);
      if (target == nullptr || *target == '\0' || std::strlen(target) > 4096) {
        return make_error("entry \"" + path + "\": empty or too long link target");
      }
      if (::symlinkat(target, parent.get(), name.c_str()) != 0) {
        return sys_error("creating " + path);
      }
      return {};
    }
    return write_file(e, parent.get(), name, path, parts.size() == 2 ? 0600 : (perm & 0777));
  }

  // manifest.json is first; then report.html, session/, the record's files directly under it,
  // and anything under session/upper and session/snapshots. Links only in the layers: there they
  // are the program's data (never followed: every open here is O_NOFOLLOW).
  Status check_layout(const std::vector<std::string>& parts, mode_t type, const std::string& path) {
    bool ok = false;
    if (parts.size() == 1) {
      ok = (parts[0] == "report.html" && type == AE_IFREG) ||
           (parts[0] == "session" && type == AE_IFDIR);
    } else if (parts[0] == "session") {
      bool layer = std::any_of(std::begin(kLayerDirs), std::end(kLayerDirs),
                               [&](const char* d) { return parts[1] == d; });
      if (parts.size() == 2) {
        ok = (is_record_file(parts[1]) && type == AE_IFREG) || (layer && type == AE_IFDIR);
      } else {
        ok = layer;
      }
    }
    if (!ok) {
      return make_error("entry \"" + path + "\" is outside a session archive's layout");
    }
    return {};
  }

  Status count(int64_t n, const std::string& path) {
    if (n < 0 || static_cast<uint64_t>(n) > limits_.max_bytes - out_.bytes) {
      return make_error("entry \"" + path + "\": contents above " +
                            std::to_string(limits_.max_bytes) + " bytes in all",
                        "--max-bytes raises the bound");
    }
    out_.bytes += static_cast<uint64_t>(n);
    return {};
  }

  Status skip_data(archive_entry* e, const std::string& path) {
    TRY(count(archive_entry_size(e), path));
    if (archive_read_data_skip(a_) != ARCHIVE_OK) {
      return archive_error(a_, "reading " + path);
    }
    return {};
  }

  Status write_file(archive_entry* e, int parent, const std::string& name, const std::string& path,
                    mode_t perm) {
    // The declared size is checked before a byte is written; the data read is counted too, since
    // a header can lie.
    if (archive_entry_size_is_set(e)) {
      if (archive_entry_size(e) < 0 ||
          static_cast<uint64_t>(archive_entry_size(e)) > limits_.max_bytes - out_.bytes) {
        return count(archive_entry_size(e), path);
      }
    }
    UniqueFd fd(
        ::openat(parent, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) {
      return sys_error("creating " + path);
    }
    char buf[1 << 16];
    for (;;) {
      la_ssize_t n = archive_read_data(a_, buf, sizeof buf);
      if (n == 0) {
        break;
      }
      if (n < 0) {
        return archive_error(a_, "reading " + path);
      }
      TRY(count(n, path));
      for (la_ssize_t off = 0; off < n;) {
        ssize_t w = ::write(fd.get(), buf + off, static_cast<size_t>(n - off));
        if (w < 0 && errno == EINTR) {
          continue;
        }
        if (w < 0) {
          return sys_error("writing " + path);
        }
        off += w;
      }
    }
    TRY(set_xattrs(e, fd.get(), path, /*dir=*/false));
    if (::fchmod(fd.get(), perm) != 0) {
      return sys_error("chmod " + path);
    }
    timespec ts[2] = {{0, UTIME_OMIT}, {archive_entry_mtime(e), 0}};
    (void)::futimens(fd.get(), ts);
    return {};
  }

  // user.* only, and of the overlayfs markers (user.overlay.*) only an overlay layer's opaque
  // directory mark: a layer of cordon-fs has none, and redirects or metacopy would make the
  // overlay reader look elsewhere than the layer.
  Status set_xattrs(archive_entry* e, int fd, const std::string& path, bool dir) {
    if (archive_entry_xattr_reset(e) == 0) {
      return {};
    }
    const char* name = nullptr;
    const void* value = nullptr;
    size_t size = 0;
    while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
      std::string_view n = name != nullptr ? name : "";
      const bool opaque_mark = dir && layer_format_ == kOverlayFormat &&
                               n == "user.overlay.opaque" && size == 1 &&
                               *static_cast<const char*>(value) == 'y';
      if (!n.starts_with("user.") || (n.starts_with("user.overlay.") && !opaque_mark)) {
        return make_error("entry \"" + path + "\": xattr \"" + std::string(n) +
                          "\" is refused (only user.* ones are carried)");
      }
      TRY(count(static_cast<int64_t>(size), path));
      if (::fsetxattr(fd, name, value, size, 0) != 0) {
        return sys_error("setting xattr " + std::string(n) + " on " + path);
      }
    }
    return {};
  }

  Status finish(const std::string& source) {
    UniqueFd session(
        ::openat(tmp_.get(), "session", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!session) {
      return make_error("the archive holds no session/ directory");
    }
    for (const char* need : {"policy.json", "events.jsonl", "summary.json"}) {
      struct stat st {};
      if (::fstatat(session.get(), need, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return make_error(std::string("the archive's session has no ") + need);
      }
    }
    // The manifest names the record's chain head as summary.json had it at export: a record
    // swapped or edited after export no longer matches (log --verify checks the lines against it).
    auto summary = store::read_file(session.get(), "summary.json", 1 << 20);
    auto sj = summary.ok() ? nlohmann::json::parse(*summary, nullptr, false) : nlohmann::json();
    std::string head;
    if (sj.is_object() && sj.contains("record") && sj["record"].is_object() &&
        sj["record"].contains("chain") && sj["record"]["chain"].is_object() &&
        sj["record"]["chain"].contains("head") && sj["record"]["chain"]["head"].is_string()) {
      head = sj["record"]["chain"]["head"].get<std::string>();
    }
    if (head != chain_head_) {
      return make_error("the manifest's chain_head does not match session/summary.json",
                        "the record was changed after export");
    }
    TRY(rebind_cow_record(session.get()));
    nlohmann::json marker = {
        {"from", out_.original_id},
        {"archive", source},
        {"chain_head", chain_head_},
        {"layer_format", layer_format_},
        {"origin_workspace", out_.origin_workspace},
        {"workspace", workspace_.empty() ? nlohmann::json() : nlohmann::json(workspace_)},
        {"imported_at", static_cast<int64_t>(::time(nullptr))}};
    if (!workspace_.empty()) {
      // The directory bound now, as commit will prove it is: a symlink swapped in later is
      // refused as for a session recorded here.
      ASSIGN_OR_RETURN(UniqueFd ws, fusefs::open_dir_nofollow(workspace_));
      ASSIGN_OR_RETURN(fusefs::WorkspaceIdentity id, fusefs::identity_of(ws.get()));
      marker["workspace_dev"] = id.dev;
      marker["workspace_ino"] = id.ino;
    }
    std::string text = marker.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    UniqueFd m(::openat(session.get(), kImportedMarker,
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!m || ::write(m.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
        ::fsync(m.get()) != 0) {
      return sys_error("writing " + std::string(kImportedMarker));
    }
    if (::fchmod(session.get(), 0700) != 0) {
      return sys_error("chmod session");
    }
    // The session directory moves into place in one step: before it nothing is listed.
    const std::string from = tmp_name_ + "/session";
    if (::renameat2(root_fd_, from.c_str(), root_fd_, out_.id.c_str(), RENAME_NOREPLACE) != 0) {
      if (errno == EEXIST) {
        return make_error("session " + out_.id + " already exists",
                          "import it under another id with --as ID");
      }
      return sys_error("moving the imported session into place");
    }
    return {};
  }

  // The archive's cow.json names the layer's format and the workspace the session ran on. The
  // format must be the manifest's (the entries were checked by it); the workspace is another
  // machine's path, or whatever the archive's author wrote (/etc): kept as origin_workspace only,
  // and the record rewritten to name the bound workspace or none.
  Status rebind_cow_record(int session_fd) {
    auto text = store::read_file(session_fd, "cow.json", kCowRecordMax);
    if (!text.ok()) {
      if (text.error().code == ENOENT) {
        return {};  // a --mode ro/rw session: no layer to review
      }
      return make_error("the archive's session/cow.json is unreadable or too large");
    }
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_object() || !j.contains("backend") || !j["backend"].is_string() ||
        (j.contains("workspace") && !j["workspace"].is_string())) {
      return make_error("the archive's session/cow.json is not a cow record");
    }
    const std::string backend = j["backend"].get<std::string>();
    if (backend != layer_format_) {
      return make_error("the archive's session/cow.json names the layer format \"" +
                            backend.substr(0, 64) + "\" but its manifest \"" + layer_format_ + "\"",
                        "the layer was checked as the manifest's format");
    }
    out_.has_layer = true;
    out_.origin_workspace = j.value("workspace", std::string());
    nlohmann::json rec = {{"workspace", workspace_},
                          {"backend", backend},
                          {"origin_workspace", out_.origin_workspace}};
    std::string body = rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (::unlinkat(session_fd, "cow.json", 0) != 0) {
      return sys_error("replacing cow.json");
    }
    UniqueFd fd(::openat(session_fd, "cow.json",
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd || ::write(fd.get(), body.data(), body.size()) != static_cast<ssize_t>(body.size())) {
      return sys_error("writing cow.json");
    }
    return {};
  }

  int root_fd_;
  struct archive* a_;
  ImportLimits limits_;
  std::string workspace_;
  std::string layer_format_ = kCordonFsFormat;
  std::string tmp_name_;
  UniqueFd tmp_;
  std::set<std::string> seen_;
  std::string chain_head_;
  Imported out_;
};

std::unique_ptr<struct archive, ReadFree> new_reader() {
  std::unique_ptr<struct archive, ReadFree> a(archive_read_new());
  if (a) {
    archive_read_support_filter_all(a.get());
    archive_read_support_format_tar(a.get());
  }
  return a;
}

}  // namespace

Result<Imported> import_archive(int root_fd, struct archive* a, const std::string& as_id,
                                const ImportLimits& limits, const std::string& source,
                                const std::string& workspace) {
  Importer imp(root_fd, a, limits, workspace);
  return imp.run(as_id, source);
}

Result<Imported> import_archive_file(int root_fd, const std::string& path, const std::string& as_id,
                                     const ImportLimits& limits, const std::string& workspace) {
  auto a = new_reader();
  if (!a) {
    return make_error("libarchive: out of memory");
  }
  // Opened here so an unreadable file is cordon's failure (errno kept), not a refused archive.
  UniqueFd file;
  if (path != "-") {
    file.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!file) {
      return sys_error("opening " + path);
    }
  }
  if (archive_read_open_fd(a.get(), path == "-" ? STDIN_FILENO : file.get(), 1 << 16) !=
      ARCHIVE_OK) {
    return archive_error(a.get(), "opening " + path);
  }
  return import_archive(root_fd, a.get(), as_id, limits, path, workspace);
}

Result<Imported> import_archive_memory(int root_fd, const void* data, size_t size,
                                       const std::string& as_id, const ImportLimits& limits) {
  auto a = new_reader();
  if (!a) {
    return make_error("libarchive: out of memory");
  }
  if (archive_read_open_memory(a.get(), data, size) != ARCHIVE_OK) {
    return archive_error(a.get(), "opening the archive");
  }
  return import_archive(root_fd, a.get(), as_id, limits, "(memory)", "");
}

}  // namespace cordon::launcher
