// Advisory network policy for the no-namespace mode: loopback and env-listed literals pass,
// everything else is refused before the syscall with a one-line reason on stderr.
#include <string.h>
#include <unistd.h>

#include "preload_shim/shim.h"

namespace cordon::preload_shim {
namespace {

// Destinations already reported (refusal lines, first-send events): a fixed open-addressing table
// of 64-bit hashes, inserted with CAS so signal handlers and threads can use it without locks.
constexpr int kSeenSlots = 256;
std::atomic<uint64_t> g_seen[kSeenSlots];

uint64_t fnv1a(const void* data, size_t len, uint64_t h) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < len; ++i) {
    h = (h ^ p[i]) * 0x100000001b3ull;
  }
  return h;
}

bool first_sight_in_table(uint64_t h) {
  h |= 1;  // 0 marks an empty slot
  for (int i = 0; i < kSeenSlots; ++i) {
    std::atomic<uint64_t>& slot = g_seen[(h + static_cast<uint64_t>(i)) % kSeenSlots];
    uint64_t cur = slot.load(std::memory_order_acquire);
    if (cur == h) {
      return false;
    }
    if (cur == 0) {
      if (slot.compare_exchange_strong(cur, h, std::memory_order_acq_rel)) {
        return true;
      }
      if (cur == h) {
        return false;
      }
    }
  }
  return false;  // table full: stay quiet rather than flood stderr or the collector
}

// Views AF_INET and AF_INET6 (including v4-mapped) as (family, 16-byte address, port).
struct Peer {
  sa_family_t family;
  uint8_t addr[16];
  uint16_t port;
};

bool to_peer(const sockaddr* sa, socklen_t len, Peer* p) {
  memset(p, 0, sizeof *p);
  if (sa->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    p->family = AF_INET;
    memcpy(p->addr, &in->sin_addr, 4);
    p->port = ntohs(in->sin_port);
    return true;
  }
  if (sa->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    const uint8_t* a = in6->sin6_addr.s6_addr;
    static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(a, kMapped, 12) == 0) {
      p->family = AF_INET;
      memcpy(p->addr, a + 12, 4);
    } else {
      p->family = AF_INET6;
      memcpy(p->addr, a, 16);
    }
    p->port = ntohs(in6->sin6_port);
    return true;
  }
  return false;
}

bool is_local(const Peer& p) {
  static const uint8_t kZero[16] = {};
  if (p.family == AF_INET) {
    // 127/8 and 0.0.0.0 (which the kernel treats as "this host").
    return p.addr[0] == 127 || memcmp(p.addr, kZero, 4) == 0;
  }
  static const uint8_t kLoop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return memcmp(p.addr, kLoop6, 16) == 0 || memcmp(p.addr, kZero, 16) == 0;
}

size_t put_hex16(char* buf, size_t cap, size_t at, unsigned v) {
  char tmp[5];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 0xf];
    v >>= 4;
  } while (v != 0);
  while (n > 0 && at + 1 < cap) {
    buf[at++] = tmp[--n];
  }
  return at;
}

}  // namespace

bool is_loopback(const sockaddr* sa, socklen_t len) {
  Peer p;
  return sa != nullptr && to_peer(sa, len, &p) && is_local(p);
}

bool is_inet(const sockaddr* sa, socklen_t len) {
  Peer p;
  return sa != nullptr && to_peer(sa, len, &p);
}

bool net_refused(const sockaddr* sa, socklen_t len) {
  Peer p;
  if (!g_config.deny_net || sa == nullptr || !to_peer(sa, len, &p) || is_local(p)) {
    return false;
  }
  for (int i = 0; i < g_config.allow_count; ++i) {
    const AllowEntry& e = g_config.allow[i];
    size_t alen = e.family == AF_INET ? 4 : 16;
    if (e.family == p.family && memcmp(e.addr, p.addr, alen) == 0 &&
        (e.port == 0 || e.port == p.port)) {
      return false;
    }
  }
  return true;
}

bool first_sight(const sockaddr* sa, socklen_t len, uint32_t salt) {
  Peer p;
  if (sa == nullptr || !to_peer(sa, len, &p)) {
    return false;
  }
  uint64_t h = fnv1a(&salt, sizeof salt, 0xcbf29ce484222325ull);
  h = fnv1a(&p.family, sizeof p.family, h);
  h = fnv1a(p.addr, sizeof p.addr, h);
  h = fnv1a(&p.port, sizeof p.port, h);
  return first_sight_in_table(h);
}

bool first_sight_hash(uint64_t hash) { return first_sight_in_table(hash); }

uint64_t hash_bytes(const void* data, size_t len, uint64_t seed) {
  return fnv1a(data, len, seed ^ 0xcbf29ce484222325ull);
}

size_t format_sockaddr(const sockaddr* sa, socklen_t len, char* buf, size_t cap) {
  Peer p;
  size_t at = 0;
  if (cap == 0) {
    return 0;
  }
  if (sa == nullptr || !to_peer(sa, len, &p)) {
    at = put(buf, cap, at, "?");
  } else if (p.family == AF_INET) {
    for (int i = 0; i < 4; ++i) {
      at = put_uint(buf, cap, at, p.addr[i]);
      at = put(buf, cap, at, i < 3 ? "." : ":");
    }
    at = put_uint(buf, cap, at, p.port);
  } else {
    // RFC 5952: lower-case hex, the longest run (>= 2) of zero groups as "::".
    unsigned g[8];
    for (int i = 0; i < 8; ++i) {
      g[i] = static_cast<unsigned>(p.addr[2 * i] << 8 | p.addr[2 * i + 1]);
    }
    int best = -1, best_len = 0;
    for (int i = 0; i < 8;) {
      int j = i;
      while (j < 8 && g[j] == 0) {
        ++j;
      }
      if (j - i > best_len && j - i >= 2) {
        best = i;
        best_len = j - i;
      }
      i = (j == i) ? i + 1 : j;
    }
    at = put(buf, cap, at, "[");
    for (int i = 0; i < 8; ++i) {
      if (i == best) {
        at = put(buf, cap, at, "::");
        i += best_len - 1;
        continue;
      }
      if (i > 0 && i != best + best_len) {
        at = put(buf, cap, at, ":");
      }
      at = put_hex16(buf, cap, at, g[i]);
    }
    at = put(buf, cap, at, "]:");
    at = put_uint(buf, cap, at, p.port);
  }
  buf[at] = '\0';
  return at;
}

void report_refusal(const char* what, const sockaddr* sa, socklen_t len) {
  if (!first_sight(sa, len, 0x72656675 /* refusals have their own key space */)) {
    return;
  }
  char line[160];
  size_t at = put(line, sizeof line, 0, "cordon: ");
  at = put(line, sizeof line, at, what);
  at = put(line, sizeof line, at, " to ");
  at += format_sockaddr(sa, len, line + at, sizeof line - at);
  at = put(line, sizeof line, at, " refused (not in network.allow)\n");
  // One write(2): async-signal-safe, and concurrent refusals do not interleave within a line.
  ssize_t ignored = write(STDERR_FILENO, line, at);
  (void)ignored;
}

}  // namespace cordon::preload_shim
