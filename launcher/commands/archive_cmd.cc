// `cordon export` and `cordon import`: a finished session as one archive, and back.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "launcher/commands.h"
#include "launcher/diagnostics.h"
#include "launcher/session/cow_session.h"
#include "launcher/session/session.h"
#include "launcher/session/session_archive.h"
#include "launcher/session/session_store.h"

namespace cordon::launcher {
namespace {

// A refusal (the session's state, the archive's content) is 1; a failing syscall is cordon's.
int say_error(const std::string& cmd, const Error& e) {
  return e.code == 0 ? say_refused(cmd, e.to_string()) : say_failed(cmd, e);
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The sessions root, made (0700) when this is the first session of the state directory.
Result<UniqueFd> make_root(const std::string& root) {
  auto fd = store::open_root(root);
  if (fd.ok() || fd.error().code != ENOENT) {
    return fd;
  }
  const size_t slash = root.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    ::mkdir(root.substr(0, slash).c_str(), 0700);  // the state dir; EEXIST is fine
  }
  if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST) {
    return sys_error("creating " + root);
  }
  return store::open_root(root);
}

// The directory `cordon import --workspace` binds: the caller names it, so it must be a real
// directory (after symlinks) that the caller owns (root may name anyone's: it could write there
// anyway, and names it itself); never "/", which holds everything.
Result<std::string> check_workspace(const std::string& dir) {
  char* real = ::realpath(dir.c_str(), nullptr);
  if (real == nullptr) {
    return sys_error("--workspace " + dir);
  }
  std::string path = real;
  std::free(real);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return sys_error("stat(\"" + path + "\")");
  }
  if (!S_ISDIR(st.st_mode)) {
    return make_error("--workspace " + dir + " is not a directory");
  }
  try {
    (void)nlohmann::json(path).dump();  // recorded in imported.json: it must survive as it is
  } catch (const nlohmann::json::exception&) {
    return make_error("--workspace " + dir + ": the path is not valid UTF-8",
                      "rename the directory, or bind one whose path is");
  }
  if (path == "/") {
    return make_error("--workspace /: the root directory is not a workspace");
  }
  if (st.st_uid != ::geteuid() && ::geteuid() != 0) {
    return make_error("--workspace " + path + " is owned by uid " + std::to_string(st.st_uid) +
                          ", not by you (uid " + std::to_string(::geteuid()) + ")",
                      "bind a directory of your own, e.g. a fresh checkout of the project");
  }
  return path;
}

}  // namespace

int export_command(const ExportOptions& opts) {
  const std::string root = sessions_root();
  auto id = resolve_session(root, opts.id);
  if (!id.ok()) {
    return say_failed("export", id.error());
  }
  std::string output = opts.output.empty() ? "cordon-session-" + *id + ".tar.zst" : opts.output;
  const bool zstd = opts.zstd || ends_with(output, ".zst");
  if (output == "-" && ::isatty(STDOUT_FILENO)) {
    return say_refused("export", "not writing an archive to a terminal; use -o FILE or a pipe");
  }
  UniqueFd out;
  if (output != "-") {
    out.reset(::open(output.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) {
      if (errno == EEXIST) {
        return say_refused("export", output + " exists; remove it or name another file");
      }
      return say_failed("export", sys_error("creating " + output));
    }
  }
  auto st = export_session(root, *id, output == "-" ? STDOUT_FILENO : out.get(), zstd);
  if (!st.ok()) {
    if (output != "-") {
      ::unlink(output.c_str());  // no half archive left to ship
    }
    return say_error("export", st.error());
  }
  if (output != "-") {
    if (::fsync(out.get()) != 0) {
      ::unlink(output.c_str());
      return say_failed("export", sys_error("fsync " + output));
    }
    std::fprintf(stderr, "cordon export: session %s written to %s\n", id->c_str(),
                 shown(output).c_str());
  }
  return kReviewDone;
}

int import_command(const ImportOptions& opts) {
  const std::string root = sessions_root();
  if (!opts.as.empty() && !store::is_session_id(opts.as)) {
    return say_refused("import", "--as " + shown(opts.as) +
                                     ": not a session id (YYYYMMDD-HHMMSS-xxxxxx, hex suffix)");
  }
  std::string workspace;
  if (!opts.workspace.empty()) {
    auto ws = check_workspace(opts.workspace);
    if (!ws.ok()) {
      return say_error("import", ws.error());
    }
    workspace = *ws;
  }
  auto root_fd = make_root(root);
  if (!root_fd.ok()) {
    return say_failed("import", root_fd.error());
  }
  ImportLimits limits;
  if (opts.max_entries != 0) {
    limits.max_entries = opts.max_entries;
  }
  if (opts.max_bytes != 0) {
    limits.max_bytes = opts.max_bytes;
  }
  auto r = import_archive_file(root_fd->get(), opts.file, opts.as, limits, workspace);
  if (r.ok() && r->stale_removed != 0) {
    say_in("import",
           "removed " + std::to_string(r->stale_removed) +
               (r->stale_removed == 1
                    ? " unfinished import directory, left by an import that was killed"
                    : " unfinished import directories, left by imports that were killed"));
  }
  if (!r.ok()) {
    return say_error("import", std::move(r).error().with_context(opts.file));
  }
  std::printf("cordon import: session %s imported from %s (%llu entries, %llu bytes)%s\n",
              r->id.c_str(), shown(opts.file).c_str(), static_cast<unsigned long long>(r->entries),
              static_cast<unsigned long long>(r->bytes),
              r->id != r->original_id ? (" as a copy of " + r->original_id).c_str() : "");
  const std::string origin = r->origin_workspace.empty() ? "?" : shown(r->origin_workspace);
  if (!r->has_layer) {
    // A --mode ro/rw session: nothing to review against a workspace, bound or not.
  } else if (workspace.empty()) {
    std::printf(
        "cordon import: it ran on %s (not used here); no workspace bound: `cordon diff` shows "
        "its layer against nothing and `cordon commit` refuses (import with --workspace DIR to "
        "bind one)\n",
        origin.c_str());
  } else {
    std::printf("cordon import: it ran on %s; bound to the workspace %s\n", origin.c_str(),
                shown(workspace).c_str());
  }
  return kReviewDone;
}

}  // namespace cordon::launcher
