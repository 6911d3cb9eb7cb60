// The rlimits half of Limits: planned in the parent, applied in the program's process before exec.
#include <sys/resource.h>

#include "launcher/limits/limits_backend.h"

namespace cordon::launcher::limits_detail {

RlimitPlan plan_rlimits(const policy::ProcessPolicy& p, LimitBackend backend) {
  RlimitPlan plan;
  auto add = [&plan](int resource, rlim_t value, const char* name) {
    plan.entries[plan.count++] = RlimitEntry{resource, value, name};
  };
  // Always: a core dump could write the program's memory (secrets included) into the workspace.
  add(RLIMIT_CORE, 0, "RLIMIT_CORE");
  if (p.nofile != 0) {
    add(RLIMIT_NOFILE, p.nofile, "RLIMIT_NOFILE");
  }
  if (p.fsize != 0) {
    add(RLIMIT_FSIZE, p.fsize, "RLIMIT_FSIZE");
  }
  if (backend == LimitBackend::Rlimits) {
    // Weaker stand-ins for the cgroup limits (describe() says how). RLIMIT_DATA bounds each
    // process's private writable memory (heap, anonymous mappings), not the tree's. Not
    // RLIMIT_AS: runtimes reserve address space far beyond what they use (V8's pointer cage,
    // Bun/JSC's gigacage, the JVM's heap and code cache, Go's arenas) and die at start under
    // an address-space limit of a few GiB; those reservations are PROT_NONE and not counted
    // here, while every page a program can write is. RLIMIT_NPROC counts the uid's processes.
    if (p.memory != 0) {
      add(RLIMIT_DATA, p.memory, "RLIMIT_DATA");
    }
    if (p.pids != 0) {
      add(RLIMIT_NPROC, p.pids, "RLIMIT_NPROC");
    }
    // No RLIMIT_CPU: cpus is a rate (cores), RLIMIT_CPU a total of seconds; the wall-clock
    // timeout is what bounds a runaway.
  }
  return plan;
}

Status apply_rlimit_plan(const RlimitPlan& plan) {
  // Child side: getrlimit/setrlimit only. No allocation unless we are failing anyway.
  for (int i = 0; i < plan.count; ++i) {
    const RlimitEntry& e = plan.entries[i];
    struct rlimit cur {};
    if (::getrlimit(e.resource, &cur) != 0) {
      return sys_error(std::string("getrlimit(") + e.name + ")");
    }
    // Raising a hard limit needs CAP_SYS_RESOURCE on the host; where the current hard limit is
    // already lower than the policy's value, keep the lower one (stricter, never weaker).
    rlim_t v = e.value;
    if (cur.rlim_max != RLIM_INFINITY && v > cur.rlim_max) {
      v = cur.rlim_max;
    }
    struct rlimit lim {
      v, v
    };
    if (::setrlimit(e.resource, &lim) != 0) {
      return sys_error(std::string("setrlimit(") + e.name + ", " + std::to_string(v) + ")");
    }
  }
  return {};
}

}  // namespace cordon::launcher::limits_detail
