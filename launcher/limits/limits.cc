// Limits: picks the strongest backend this host offers (cgroup v2, cgroup v1, rlimits) and says
// plainly which one is in force.
#include "launcher/limits/limits.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include "launcher/limits/limits_backend.h"

namespace cordon::launcher {

using limits_detail::CgroupTree;
using limits_detail::format_bytes;
using limits_detail::LimitValues;
using limits_detail::RlimitPlan;

struct Limits::State {
  LimitBackend backend = LimitBackend::Rlimits;
  LimitValues values;
  uint32_t nofile = 0;
  uint64_t fsize = 0;
  std::unique_ptr<CgroupTree> cgroup;  // null for Rlimits
  RlimitPlan rlimits;                  // computed in the parent; the child only loops setrlimit
  std::string why_no_cgroup;           // for describe() when on rlimits
};

namespace {

std::string format_cpus(double cpus) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g", cpus);
  std::string s = buf;
  if (s.find('.') == std::string::npos && s.find('e') == std::string::npos) {
    s += ".0";
  }
  return s;
}

}  // namespace

Result<Limits> Limits::create(const policy::ProcessPolicy& p, const std::string& session_id) {
  if (session_id.empty() || session_id.find('/') != std::string::npos || session_id == "." ||
      session_id == "..") {
    return make_error("Limits::create: session id \"" + session_id +
                      "\" cannot name a cgroup directory");
  }
  auto s = std::make_unique<State>();
  s->values = LimitValues{p.memory, p.cpus, p.pids};
  s->nofile = p.nofile;
  s->fsize = p.fsize;

  // A backend that is present but cannot be configured is an error, never a silent fallback:
  // the user asked for limits and would otherwise get weaker ones without knowing.
  auto v2 = limits_detail::probe_cgroup_v2();
  auto v1 = limits_detail::probe_cgroup_v1();
  if (v2.usable) {
    ASSIGN_OR_RETURN(s->cgroup, limits_detail::create_cgroup_v2(s->values, session_id));
    s->backend = LimitBackend::CgroupV2;
  } else if (v1.usable) {
    ASSIGN_OR_RETURN(s->cgroup, limits_detail::create_cgroup_v1(s->values, session_id));
    s->backend = LimitBackend::CgroupV1;
  } else {
    s->backend = LimitBackend::Rlimits;
    s->why_no_cgroup = v2.brief + ", " + v1.brief;
  }
  s->rlimits = limits_detail::plan_rlimits(p, s->backend);
  Limits l;
  l.s_ = s.release();
  return l;
}

Limits::Limits(Limits&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}

Limits& Limits::operator=(Limits&& o) noexcept {
  if (this != &o) {
    delete s_;
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}

Limits::~Limits() { delete s_; }  // CgroupTree's destructor kills leftovers and removes the dirs

Status Limits::add_process(pid_t pid) {
  if (s_ == nullptr || !s_->cgroup) {
    return {};
  }
  return s_->cgroup->add_process(pid);
}

Status Limits::apply_rlimits_in_child() const {
  if (s_ == nullptr) {
    return make_error("apply_rlimits_in_child: Limits was moved from");
  }
  return limits_detail::apply_rlimit_plan(s_->rlimits);
}

std::string Limits::describe() const {
  if (s_ == nullptr) {
    return "limits: none (moved-from)";
  }
  const auto& v = s_->values;
  std::string extra;
  extra += ", nofile " + std::to_string(s_->nofile);
  if (s_->fsize != 0) {
    extra += ", file size " + format_bytes(s_->fsize);
  }
  extra += ", no core dumps";
  if (s_->backend != LimitBackend::Rlimits) {
    std::string line =
        s_->backend == LimitBackend::CgroupV2 ? "limits: cgroup v2 (" : "limits: cgroup v1 (";
    line += "memory " + (v.memory ? format_bytes(v.memory) : std::string("unlimited"));
    line += ", cpus " + (v.cpus > 0 ? format_cpus(v.cpus) : std::string("unlimited"));
    line += ", pids " + (v.pids ? std::to_string(v.pids) : std::string("unlimited"));
    return line + extra + ")";
  }
  // rlimits are weaker than cgroups in ways the user must know about; name each one.
  // RLIMIT_DATA bounds each process's private writable memory (heap and anonymous mappings,
  // counted when mapped writable, not when touched; file-backed and shared memory not at all);
  // RLIMIT_NPROC counts the processes of the sandbox's uid in its user namespace (init
  // included), not a tree; no rlimit caps a CPU rate.
  std::string line = "limits: rlimits only (";
  line += v.memory ? "memory " + format_bytes(v.memory) +
                         " of private writable memory per process (RLIMIT_DATA), not the whole "
                         "sandbox's"
                   : std::string("memory unlimited");
  line += v.pids ? ", pids per uid " + std::to_string(v.pids) : std::string(", pids unlimited");
  line += v.cpus > 0 ? ", cpus not enforced" : std::string(", cpus unlimited");
  line += extra + "; no cgroup: " + s_->why_no_cgroup + ")";
  return line;
}

LimitBackend Limits::backend() const { return s_ ? s_->backend : LimitBackend::Rlimits; }

Usage Limits::usage() const {
  if (s_ == nullptr || !s_->cgroup) {
    return {};
  }
  return s_->cgroup->usage();
}

void Limits::kill_all() const {
  if (s_ != nullptr && s_->cgroup) {
    s_->cgroup->kill_all();
  }
}

std::vector<std::string> Limits::cgroup_paths() const {
  if (s_ == nullptr || !s_->cgroup) {
    return {};
  }
  return s_->cgroup->paths();
}

CgroupSupport cgroup_support() {
  std::ifstream f("/proc/self/mountinfo");
  std::stringstream text;
  text << f.rdbuf();
  bool v1 = false, v2 = false;
  for (const auto& m : limits_detail::read_cgroup_mounts(text.str())) {
    (m.fstype == "cgroup2" ? v2 : v1) = true;
  }
  CgroupSupport c;
  c.hierarchy = v1 && v2 ? "hybrid (v1 and v2)" : v2 ? "v2" : v1 ? "v1" : "none mounted";
  // The order Limits::create tries them in.
  limits_detail::Probe p2 = limits_detail::probe_cgroup_v2();
  limits_detail::Probe p = p2.usable ? p2 : limits_detail::probe_cgroup_v1();
  c.usable = p.usable;
  if (!p.usable) {
    c.why_not = p2.why_not + "; " + p.why_not;
    c.brief = p2.brief + ", " + p.brief;
  }
  return c;
}

}  // namespace cordon::launcher
