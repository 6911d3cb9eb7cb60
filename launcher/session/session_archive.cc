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
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/commands/report/report_cmd.h"
#include "launcher/session/session.h"
#include "launcher/session/session_store.h"

namespace cordon::launcher {
namespace {

// The record's files: the only names session/ may hold besides upper/ and snapshots/.
constexpr const char* kRecordFiles[] = {"policy.json",       kRequestedPolicy, "events.jsonl",
                                        "events.jsonl.head", "summary.json",   "cow.json",
                                        "cordon-fs.log"};
constexpr const char* kLayerDirs[] = {"upper", "snapshots"};
constexpr size_t kManifestMax = 64 * 1024;
constexpr int kExportDepth = 256;

bool is_record_file(std::string_view name) {
  return std::any_of(std::begin(kRecordFiles), std::end(kRecordFiles),
                     [&](const char* f) { return name == f; });
}

struct ArchiveFree {
  void operator()(struct archive* a) const {
    if (a != nullptr) {
      archive_write_free(a);  // archive_read_free and archive_write_free are the same call
    }
  }
};
struct ReadFree {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};
using EntryPtr = std::unique_ptr<archive_entry, EntryFree>;

Error archive_error(struct archive* a, const std::string& what) {
  const char* msg = archive_error_string(a);
  return make_error(what + ": " + (msg != nullptr ? msg : "archive error"));
}

// ---- export ----

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
  // policy's filesystem.xattrs allows. Other namespaces are the host's, never carried.
  Status take_xattrs(int fd, const std::string& path) {
    char names[1 << 16];
    ssize_t n = ::flistxattr(fd, names, sizeof names);
    if (n < 0) {
      return errno == ENOTSUP ? Status{} : sys_error("listing xattrs of " + path);
    }
    for (ssize_t i = 0; i < n;) {
      std::string name(names + i);
      i += static_cast<ssize_t>(name.size()) + 1;
      if (!name.starts_with("user.")) {
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

 private:
  struct archive* a_;
  std::vector<std::pair<std::string, std::string>> xattrs_;
};

// Writes the tree under `dir_fd` as `prefix`/..., names sorted so an archive is reproducible.
Status export_tree(Writer& w, int dir_fd, const std::string& prefix, int depth) {
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
      return make_error(path + " is neither a file, a directory nor a symlink",
                        "an overlayfs-format layer (device-node whiteouts) cannot be exported");
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
    TRY(w.take_xattrs(fd.get(), path));
    if (S_ISDIR(st.st_mode)) {
      TRY(w.header(path, AE_IFDIR, st.st_mode, 0, st.st_mtim.tv_sec));
      TRY(export_tree(w, fd.get(), path, depth + 1));
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
  if (auto cow = store::read_file(dir.get(), "cow.json", 1 << 16); cow.ok()) {
    auto j = nlohmann::json::parse(*cow, nullptr, false);
    if (j.is_object() && j.value("backend", std::string()) == "overlay") {
      return make_error("session " + id + " ran on the kernel overlayfs fallback",
                        "its whiteouts are device nodes, which an archive does not carry");
    }
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
                             {"chain_head", head}};
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
    TRY(export_tree(w, sub.get(), std::string("session/") + name, 1));
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    return archive_error(a.get(), "finishing the archive");
  }
  return {};
}

// ---- import ----

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
  Importer(int root_fd, struct archive* a, const ImportLimits& limits)
      : root_fd_(root_fd), a_(a), limits_(limits) {}
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

  Status make_temp() {
    std::random_device rd;
    for (int i = 0; i < 16; ++i) {
      std::string name = ".import-" + std::to_string(rd());
      if (::mkdirat(root_fd_, name.c_str(), 0700) == 0) {
        tmp_name_ = name;
        tmp_.reset(
            ::openat(root_fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!tmp_) {
          return sys_error("open " + name);
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
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      return make_error("entry \"" + path + "\": devices, FIFOs and sockets are refused");
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
    if (parts[0] == "report.html") {
      return skip_data(e, path);  // regenerated by `cordon report` from the record
    }
    ASSIGN_OR_RETURN(UniqueFd parent, open_parent(parts, path));
    const std::string& name = parts.back();
    if (type == AE_IFDIR) {
      if (::mkdirat(parent.get(), name.c_str(), 0700) != 0) {
        return sys_error("creating " + path);
      }
      UniqueFd d(
          ::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!d) {
        return sys_error("open " + path);
      }
      TRY(set_xattrs(e, d.get(), path));
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
    TRY(set_xattrs(e, fd.get(), path));
    if (::fchmod(fd.get(), perm) != 0) {
      return sys_error("chmod " + path);
    }
    timespec ts[2] = {{0, UTIME_OMIT}, {archive_entry_mtime(e), 0}};
    (void)::futimens(fd.get(), ts);
    return {};
  }

  // user.* only, and never the overlayfs markers (user.overlay.*): a layer of cordon-fs has none.
  Status set_xattrs(archive_entry* e, int fd, const std::string& path) {
    if (archive_entry_xattr_reset(e) == 0) {
      return {};
    }
    const char* name = nullptr;
    const void* value = nullptr;
    size_t size = 0;
    while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
      std::string_view n = name != nullptr ? name : "";
      if (!n.starts_with("user.") || n.starts_with("user.overlay.")) {
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
    nlohmann::json marker = {{"from", out_.original_id},
                             {"archive", source},
                             {"chain_head", chain_head_},
                             {"imported_at", static_cast<int64_t>(::time(nullptr))}};
    std::string text = marker.dump(2) + "\n";
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

  int root_fd_;
  struct archive* a_;
  ImportLimits limits_;
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
                                const ImportLimits& limits, const std::string& source) {
  Importer imp(root_fd, a, limits);
  return imp.run(as_id, source);
}

Result<Imported> import_archive_file(int root_fd, const std::string& path, const std::string& as_id,
                                     const ImportLimits& limits) {
  auto a = new_reader();
  if (!a) {
    return make_error("libarchive: out of memory");
  }
  int rc = path == "-" ? archive_read_open_fd(a.get(), STDIN_FILENO, 1 << 16)
                       : archive_read_open_filename(a.get(), path.c_str(), 1 << 16);
  if (rc != ARCHIVE_OK) {
    return archive_error(a.get(), "opening " + path);
  }
  return import_archive(root_fd, a.get(), as_id, limits, path);
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
  return import_archive(root_fd, a.get(), as_id, limits, "(memory)");
}

}  // namespace cordon::launcher
