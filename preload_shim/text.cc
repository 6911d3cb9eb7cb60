// Bounded text building on caller-owned buffers: no allocation, async-signal-safe.
#include "preload_shim/shim.h"

namespace cordon::preload_shim {

size_t put(char* buf, size_t cap, size_t at, const char* s) {
  while (s != nullptr && *s != '\0' && at + 1 < cap) {
    buf[at++] = *s++;
  }
  buf[at] = '\0';
  return at;
}

size_t put_uint(char* buf, size_t cap, size_t at, unsigned v) {
  char tmp[12];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0 && at + 1 < cap) {
    buf[at++] = tmp[--n];
  }
  buf[at] = '\0';
  return at;
}

}  // namespace cordon::preload_shim
