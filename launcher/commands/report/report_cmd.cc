// `cordon report ID [-o FILE|-] [--force]`: reads the session record, builds the page, writes it
// in one piece (a temporary file renamed into place) so a reader never sees half a report.
#include "launcher/commands/report/report_cmd.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iostream>

#include "launcher/commands/report/files_view.h"
#include "launcher/commands/report/model.h"
#include "launcher/commands/report/page.h"
#include "launcher/diagnostics.h"
#include "launcher/run_options.h"
#include "launcher/session/session.h"
#include "launcher/session/session_store.h"

namespace cordon::launcher {
namespace {

constexpr size_t kMaxSmallFile = 4 << 20;  // summary.json, policy.json

Result<report::SessionRecord> read_record(const std::string& root, const std::string& id) {
  ASSIGN_OR_RETURN(UniqueFd root_fd, store::open_root(root));
  ASSIGN_OR_RETURN(UniqueFd dir, store::open_session_dir(root_fd.get(), id));
  report::SessionRecord rec;
  rec.id = id;
  // A session still running, or whose cordon was killed, has no summary: the events tell.
  if (auto s = store::read_file(dir.get(), "summary.json", kMaxSmallFile); s.ok()) {
    rec.summary = store::parse_event(*s);  // depth-checked like every line of the record
  }
  if (auto p = store::read_file(dir.get(), "policy.json", kMaxSmallFile); p.ok()) {
    rec.policy_text = std::move(*p);
  }
  ASSIGN_OR_RETURN(UniqueFd events, store::open_file(dir.get(), "events.jsonl"));
  struct stat st {};
  if (::fstat(events.get(), &st) != 0) {
    return sys_error("fstat(events.jsonl)");
  }
  const size_t size = st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0;
  rec.truncated = size > report::kMaxEventsRead;
  // Only what is there: read_head allocates (and zeroes) all it is asked for.
  report::add_events(rec, store::read_head(events.get(), std::min(size, report::kMaxEventsRead)));
  rec.files = report::files_view(id);
  return rec;
}

// Writes `page` to `path` through a temporary file beside it, renamed into place; without
// `force` an existing `path` is left alone (RENAME_NOREPLACE) and reported.
Status write_page(const std::string& path, const std::string& page, bool force, bool* exists) {
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  std::string tmp = dir + (dir.back() == '/' ? "" : "/") + ".cordon-report.XXXXXX";
  int raw = ::mkostemp(tmp.data(), O_CLOEXEC);  // 0600: the record is the user's alone
  if (raw < 0) {
    return sys_error("mkstemp(\"" + tmp + "\")", "is the directory writable?");
  }
  UniqueFd fd(raw);
  size_t off = 0;
  while (off < page.size()) {
    ssize_t n = ::write(fd.get(), page.data() + off, page.size() - off);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      Error e = sys_error("write(\"" + tmp + "\")");
      ::unlink(tmp.c_str());
      return e;
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) {
    Error e = sys_error("fsync(\"" + tmp + "\")");
    ::unlink(tmp.c_str());
    return e;
  }
  int rc = force ? ::rename(tmp.c_str(), path.c_str())
                 : ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
  if (rc != 0 && !force && errno == EINVAL) {
    // A filesystem without RENAME_NOREPLACE: link(2) refuses an existing name just the same.
    rc = ::link(tmp.c_str(), path.c_str());
    if (rc == 0) {
      ::unlink(tmp.c_str());
    }
  }
  if (rc != 0) {
    Error e = sys_error("rename(\"" + tmp + "\", \"" + path + "\")");
    *exists = errno == EEXIST;
    ::unlink(tmp.c_str());
    return e;
  }
  return {};
}

}  // namespace

int report_command(const std::string& root, const ReportOptions& opts, std::ostream& out) {
  auto id = resolve_session(root, opts.id);
  if (!id.ok()) {
    return fail_in("report", id.error().to_string());
  }
  auto rec = read_record(root, *id);
  if (!rec.ok()) {
    return fail_in("report", "session " + *id + ": " + rec.error().to_string());
  }
  const std::string page = report::render_page(report::build_model(*rec));
  if (opts.output == "-") {
    out << page;
    out.flush();
    return out ? 0 : fail_in("report", "writing the report to stdout failed");
  }
  const std::string path = opts.output.empty() ? "cordon-report-" + *id + ".html" : opts.output;
  bool exists = false;
  auto st = write_page(path, page, opts.force, &exists);
  if (!st.ok()) {
    if (exists) {
      say_in("report", path + " exists; --force replaces it, -o FILE writes elsewhere");
      return 1;
    }
    return fail_in("report", st.error().to_string());
  }
  say_in("report", "session " + *id + ": " + path + " (" + std::to_string(page.size() / 1024) +
                       " KiB; open it in a browser, it loads nothing from the network)");
  return 0;
}

int report_command(const ReportOptions& opts) {
  return report_command(sessions_root(), opts, std::cout);
}

}  // namespace cordon::launcher
