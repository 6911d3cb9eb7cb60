// The data path after a decision: bytes move socket -> pipe -> socket with splice(2), never
// through user-space buffers, with backpressure and exact byte budgets. Used by the tunnels
// (CONNECT, SOCKS5, transparent) and for HTTP bodies of known length.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <optional>

#include "netproxy/context.h"

namespace cordon::netproxy {

enum class PumpEnd {
  Eof,         // `from` sent FIN; everything before it was delivered
  Limit,       // `limit` bytes were moved
  Budget,      // the session's byte budget for this direction ran out (nothing beyond it moved)
  ReadError,   // reading `from` failed (reset, closed under us, cancelled)
  WriteError,  // writing `to` failed
};

struct PumpStats {
  uint64_t* written = nullptr;                 // bytes delivered to `to`, added as they go
  Clock::time_point* last_activity = nullptr;  // for idle timeouts; updated on every move
};

// Moves bytes from `from` to `to` until EOF, `limit` bytes (nullopt: until EOF), the byte budget
// of this direction (`outbound`: sandbox -> upstream), or an error. Backpressure: nothing more is
// read from `from` while a chunk still waits for `to` to take it. Both sockets are set
// non-blocking. Cancellation (closing either socket) ends it with ReadError/WriteError.
asio::awaitable<PumpEnd> pump(Context& ctx, tcp::socket& from, tcp::socket& to,
                              std::optional<uint64_t> limit, bool outbound, PumpStats stats);

}  // namespace cordon::netproxy
