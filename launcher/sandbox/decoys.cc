// Writing and watching the canaries' decoy files in the sandbox (see decoys.h).
#include "launcher/sandbox/decoys.h"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "base/unique_fd.h"
#include "launcher/channel.h"

namespace cordon::launcher {

namespace {

constexpr const char* kWatchHint =
    "raise fs.inotify.max_user_instances and fs.inotify.max_user_watches, or set \"canaries\": "
    "false in the policy";

// The directories between the home and `target`: the home's tmpfs is the sandbox's own and
// nothing has run in it yet.
Status make_parents(const std::string& home, const std::string& target) {
  for (size_t at = target.find('/', home.size() + 1); at != std::string::npos;
       at = target.find('/', at + 1)) {
    const std::string dir = target.substr(0, at);
    const bool private_dir = dir == home + "/.ssh";  // ssh refuses keys in a group-readable dir
    const mode_t mode = private_dir ? 0700 : 0755;
    if (::mkdir(dir.c_str(), mode) == 0) {
      if (::chmod(dir.c_str(), mode) != 0) {  // as its tools make it, whatever cordon's umask
        return sys_error("chmod(\"" + dir + "\") for a canary");
      }
    } else if (errno != EEXIST) {
      return sys_error("mkdir(\"" + dir + "\") for a canary");
    }
  }
  return {};
}

Result<struct stat> write_decoy(const DecoyFile& d) {
  UniqueFd fd(::open(d.target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) {
    return sys_error("open(\"" + d.target + "\", O_CREAT|O_EXCL) for the " + d.canary + " canary");
  }
  size_t done = 0;
  while (done < d.content.size()) {
    const ssize_t n = ::write(fd.get(), d.content.data() + done, d.content.size() - done);
    if (n <= 0) {
      return sys_error("write(\"" + d.target + "\") for the " + d.canary + " canary");
    }
    done += static_cast<size_t>(n);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return sys_error("fstat(\"" + d.target + "\") for the " + d.canary + " canary");
  }
  return st;
}

}  // namespace

Status plant_decoys_in_child(const LaunchPlan& plan, int report_fd) {
  if (plan.decoys.empty()) {
    return {};
  }
  UniqueFd watch(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!watch) {
    return sys_error("inotify_init1() for the canaries' files", kWatchHint);
  }
  std::string report;
  for (const auto& d : plan.decoys) {
    TRY(make_parents(plan.home, d.target));
    ASSIGN_OR_RETURN(struct stat st, write_decoy(d));
    // After the write and close: the child's own open is not one the program made.
    const int wd = ::inotify_add_watch(watch.get(), d.target.c_str(), IN_OPEN | IN_DONT_FOLLOW);
    if (wd < 0) {
      return sys_error("inotify_add_watch(\"" + d.target + "\", IN_OPEN) for a canary", kWatchHint);
    }
    report += std::to_string(wd) + " " + std::to_string(st.st_dev) + " " +
              std::to_string(st.st_ino) + "\n";
  }
  if (!send_msg(report_fd, MsgKind::Decoys, static_cast<int32_t>(plan.decoys.size()),
                report.c_str(), watch.get())) {
    return sys_error("sendmsg(the canaries' watch to cordon)");
  }
  return {};
}

}  // namespace cordon::launcher
