// Reads the NFLOG socket on the proxy's io_context: each dropped packet becomes a net.refused
// event, rate-bounded by DropEventLimiter with a summary at the end of a busy second.
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <vector>

#include "netproxy/frontends.h"
#include "netproxy/nflog.h"

namespace cordon::netproxy {

using namespace asio::experimental::awaitable_operators;

asio::awaitable<void> serve_nflog(Context& ctx, asio::posix::stream_descriptor& sock,
                                  uint32_t per_second) {
  DropEventLimiter limiter(per_second);
  asio::steady_timer timer(ctx.io);
  // One datagram holds up to kQueueThreshold packet messages of ~200 bytes; 64 KiB leaves room.
  std::vector<uint8_t> buf(64 * 1024);
  auto emit_summary = [&](bool force) {
    if (auto s = limiter.flush(Clock::now(), force)) {
      ctx.emit("net.refused", drop_summary_event(*s, per_second));
    }
  };
  for (;;) {
    boost::system::error_code ec;
    if (limiter.pending()) {
      // Wake at the end of the window even if no further packet arrives, to write the summary.
      timer.expires_at(limiter.window_end());
      auto r = co_await (sock.async_wait(asio::posix::descriptor_base::wait_read, use_nothrow) ||
                         timer.async_wait(use_nothrow));
      if (r.index() == 0) {
        ec = std::get<0>(std::get<0>(r));
      }
    } else {
      std::tie(ec) = co_await sock.async_wait(asio::posix::descriptor_base::wait_read, use_nothrow);
    }
    if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) {
      emit_summary(true);
      co_return;
    }
    emit_summary(false);
    // Drain what is queued, bounded so one flood cannot starve the connections on this thread.
    for (int i = 0; i < 64; ++i) {
      ssize_t n = ::recv(sock.native_handle(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) {
          break;
        }
        if (errno == ENOBUFS) {
          limiter.count_overrun();  // the kernel dropped log messages; keep reading
          continue;
        }
        spdlog::warn("cordon-netproxy: recv(--nflog-fd): {}; dropped packets are no longer logged",
                     std::strerror(errno));
        emit_summary(true);
        co_return;
      }
      size_t got = std::min(static_cast<size_t>(n), buf.size());
      auto batch = wire::parse_nflog(std::span<const uint8_t>(buf.data(), got));
      limiter.count_unreadable(batch.unreadable + (batch.malformed ? 1 : 0));
      const auto now = Clock::now();
      for (const auto& p : batch.packets) {
        if (limiter.admit(p, now)) {
          std::string name;
          if (auto names = ctx.names.lookup(p.dst, now); !names.empty()) {
            name = names.front().name;
          }
          ctx.emit("net.refused", drop_event(p, name));
        }
      }
    }
  }
}

}  // namespace cordon::netproxy
