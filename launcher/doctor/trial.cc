// The sandbox trial: one clone3 child, as a run makes it, that tries each namespace step and
// reports every outcome (not only the first failure) over a pipe.
#include "launcher/doctor/trial.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/child_process.h"
#include "launcher/plan.h"
#include "launcher/sandbox/mounts.h"
#include "launcher/sandbox/namespaces.h"
#include "launcher/sandbox/netns.h"
#include "launcher/sandbox/userns.h"

namespace cordon::launcher::doctor {
namespace {

enum Step : int { kHostname = 0, kCapture = 1, kOverlay = 2, kProc = 3, kSteps = 4 };
constexpr char kSep = '\x1f';  // never in a message: they are built from paths and strerror
constexpr auto kDeadline = std::chrono::seconds(20);

// One report line: "STEP<sep>KIND<sep>ERRNO<sep>MESSAGE<sep>HINT\n", KIND 0 ok, 1 failed,
// 2 not tried.
void send_step(int fd, Step step, int kind, const Error& e = {}) {
  std::string line = std::to_string(step) + kSep + std::to_string(kind) + kSep +
                     std::to_string(e.code) + kSep + e.message + kSep + e.hint + "\n";
  for (char& ch : line) {
    if (ch == '\n' && &ch != &line.back()) {
      ch = ' ';
    }
  }
  // One write per step: a short write only loses that step, which the parent reports as such.
  (void)::write(fd, line.data(), line.size());
}

void send_status(int fd, Step step, const Status& s) {
  if (s.ok()) {
    send_step(fd, step, 0);
  } else {
    send_step(fd, step, 1, s.error());
  }
}

Status capture_step() {
  TRY(bring_up_loopback_in_child());
  return try_capture_ruleset_in_child();
}

Status proc_step() {
  // Nothing mounted here may reach the host's mount tree, even as a propagation event.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return sys_error("mount(NULL, \"/\", MS_REC|MS_PRIVATE)");
  }
  return mount_proc("/proc", false);
}

// Child side: waits for the id maps, then tries every step. /proc goes last: it is mounted
// over the old one, which the steps before it read (/proc/self/exe, /proc/self/fd).
void child_steps(int release, int report, const std::string& scratch) {
  char go = 0;
  if (::read(release, &go, 1) != 1) {
    ::_exit(1);  // the parent could not map the ids: it reports that
  }
  send_status(report, kHostname, set_hostname_in_child("cordon"));
  send_status(report, kCapture, capture_step());
  if (scratch.empty()) {
    send_step(report, kOverlay, 2);
  } else {
    auto r = try_cow_overlay(scratch + "/lower", scratch + "/upper", scratch + "/work");
    if (!r.ok()) {
      send_step(report, kOverlay, 1, r.error());
    } else {
      send_step(report, kOverlay, *r ? 0 : 2);
    }
  }
  send_status(report, kProc, proc_step());
  ::_exit(0);
}

Status not_reported(const char* why) { return make_error(std::string("not tried: ") + why); }

// Reads the child's lines until it closes the pipe or the deadline passes.
std::vector<std::string> read_reports(int fd) {
  std::string buf;
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  for (int rounds = 0; rounds < 1000; ++rounds) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      break;
    }
    char chunk[4096];
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) {
      break;
    }
    buf.append(chunk, static_cast<size_t>(n));
  }
  std::vector<std::string> lines;
  size_t at = 0;
  for (size_t nl; (nl = buf.find('\n', at)) != std::string::npos; at = nl + 1) {
    lines.push_back(buf.substr(at, nl - at));
  }
  return lines;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char ch : s) {
    if (ch == sep) {
      out.emplace_back();
    } else {
      out.back() += ch;
    }
  }
  return out;
}

Status make_scratch(const std::string& scratch) {
  for (const char* sub : {"/lower", "/upper", "/work"}) {
    std::string p = scratch + sub;
    if (::mkdir(p.c_str(), 0700) != 0) {
      return sys_error("mkdir(\"" + p + "\")");
    }
  }
  return {};
}

}  // namespace

SandboxTrial run_sandbox_trial(const std::string& scratch) {
  SandboxTrial t;
  t.hostname = t.proc = t.capture = not_reported("the namespaces could not be created");
  if (!scratch.empty()) {
    if (auto s = make_scratch(scratch); !s.ok()) {
      t.overlay = std::move(s).error();
    }
  }
  bool try_overlay = !scratch.empty() && t.overlay.ok();
  int rel[2], rep[2];
  if (::pipe2(rel, O_CLOEXEC) != 0) {
    t.clone = sys_error("pipe2()");
    return t;
  }
  UniqueFd rel_r(rel[0]), rel_w(rel[1]);
  if (::pipe2(rep, O_CLOEXEC) != 0) {
    t.clone = sys_error("pipe2()");
    return t;
  }
  UniqueFd rep_r(rep[0]), rep_w(rep[1]);
  std::string child_scratch = try_overlay ? scratch : "";
  auto cloned = clone_sandbox([&] { child_steps(rel_r.get(), rep_w.get(), child_scratch); });
  if (!cloned.ok()) {
    if (try_overlay) {
      t.overlay = not_reported("the namespaces could not be created").error();
    }
    t.clone = std::move(cloned).error();
    return t;
  }
  ChildProcess child(cloned->pid);  // killed and reaped on every return path
  rel_r.reset();
  rep_w.reset();
  // The maps a rootless run writes; as root the same single id (uid 0 here: nothing but this
  // probe ever runs in the namespace).
  IdPlan ids;
  ids.uid = ::geteuid();
  ids.gid = ::getegid();
  ids.rootless = true;
  t.clone = write_id_maps_from_parent(cloned->pid, ids);
  if (!t.clone.ok()) {
    t.hostname = t.proc = t.capture = not_reported("the id maps could not be written");
    rel_w.reset();  // EOF: the waiting child exits at once
    return t;
  }
  if (::write(rel_w.get(), "1", 1) != 1) {
    t.clone = sys_error("write(release pipe of the trial child)");
    return t;
  }
  rel_w.reset();
  t.hostname = t.proc = t.capture = not_reported("the trial child did not report in time");
  if (try_overlay) {
    t.overlay = not_reported("the trial child did not report in time").error();
  }
  for (const std::string& line : read_reports(rep_r.get())) {
    std::vector<std::string> f = split(line, kSep);
    if (f.size() != 5) {
      continue;
    }
    int step = std::atoi(f[0].c_str());
    int kind = std::atoi(f[1].c_str());
    Status st;
    if (kind == 1) {
      st = Error{f[3], std::atoi(f[2].c_str()), f[4]};
    }
    switch (step) {
      case kHostname:
        t.hostname = st;
        break;
      case kCapture:
        t.capture = st;
        break;
      case kProc:
        t.proc = st;
        break;
      case kOverlay:
        if (kind == 1) {
          t.overlay = st.error();
        } else {
          t.overlay = kind == 0;
        }
        break;
      default:
        break;
    }
  }
  child.stop(std::chrono::milliseconds(500));
  return t;
}

Status run_in_forked_child(const std::function<Status()>& fn) {
  int rep[2];
  if (::pipe2(rep, O_CLOEXEC) != 0) {
    return sys_error("pipe2()");
  }
  UniqueFd rep_r(rep[0]), rep_w(rep[1]);
  pid_t pid = ::fork();
  if (pid < 0) {
    return sys_error("fork()");
  }
  if (pid == 0) {
    // Exception firewall: nothing unwinds out of the child.
    try {
      send_status(rep_w.get(), kHostname, fn());
    } catch (...) {
    }
    ::_exit(0);
  }
  ChildProcess child(pid);
  rep_w.reset();
  std::vector<std::string> lines = read_reports(rep_r.get());
  child.stop(std::chrono::milliseconds(500));
  if (lines.empty()) {
    return make_error("the probe's child ended without a report");
  }
  std::vector<std::string> f = split(lines.front(), kSep);
  if (f.size() != 5 || f[1] == "0") {
    return {};
  }
  return Error{f[3], std::atoi(f[2].c_str()), f[4]};
}

}  // namespace cordon::launcher::doctor
