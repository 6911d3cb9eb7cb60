// The i386 syscall entry (int $0x80) from a 64-bit process, and whether this kernel serves it.
// Kernels built without IA32 emulation or booted with ia32_emulation=0 answer int $0x80 with
// SIGSEGV before any seccomp filter runs, so a test of the filter's bad-arch action must know
// which kernel it is on.
#pragma once

#include <csignal>
#include <string>

#include "tests/support/fork_child.h"

namespace cordon::testing {

// i386 getpid (20); returns the raw result as text.
inline std::string int80_getpid() {
  long ret;
  long nr = 20;
  asm volatile("int $0x80" : "=a"(ret) : "a"(nr) : "memory");
  return std::to_string(ret);
}

struct Ia32Support {
  bool served = false;  // int $0x80 getpid returned a pid
  int refused_by = 0;   // otherwise the signal the kernel answered with (SIGSEGV)
};

// Probed in a forked child with no filter installed.
inline Ia32Support probe_ia32() {
  ChildResult r = run_in_child(int80_getpid);
  Ia32Support s;
  s.served = r.exited_ok() && !r.out.empty() && r.out[0] != '-' && std::stol(r.out) > 0;
  s.refused_by = r.signal();
  return s;
}

}  // namespace cordon::testing
