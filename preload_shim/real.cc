// Resolution of the real libc entry points behind each interposer.
#include <errno.h>

#include "preload_shim/shim.h"

namespace cordon::preload_shim {
namespace {

std::atomic<void*> g_real[kRealCount];

constexpr const char* kRealNames[kRealCount] = {
#define CORDON_REAL_NAME(name) #name,
    CORDON_REAL_FUNCTIONS(CORDON_REAL_NAME)
#undef CORDON_REAL_NAME
};

}  // namespace

void* resolve_real(RealId id) {
  void* fn = g_real[id].load(std::memory_order_acquire);
  if (fn == nullptr) {
    // Two threads may both get here; both store the same pointer.
    fn = dlsym(RTLD_NEXT, kRealNames[id]);
    g_real[id].store(fn, std::memory_order_release);
  }
  return fn;
}

void resolve_all_reals() {
  for (int i = 0; i < kRealCount; ++i) {
    resolve_real(static_cast<RealId>(i));
  }
}

}  // namespace cordon::preload_shim
