// The splice(2) pump (netproxy/splice.h) on real loopback TCP sockets: exact byte counts over a
// large transfer to a slow reader, limits that never read a byte too many, budgets cut mid-body,
// half-close, and pipes lent only while bytes are in flight.
#include "netproxy/splice.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace cordon::netproxy {
namespace {

using namespace std::chrono_literals;

// The byte at offset i of every test stream: a period (251) that no pipe or segment size divides,
// so a lost, repeated or reordered chunk shows.
char pattern(uint64_t i) { return static_cast<char>((i * 7 + i / 251) % 251); }

// A connected loopback pair: `outer` (a blocking fd the test's threads use) and `inner` (the
// proxy-side asio socket the pump moves bytes through).
struct Pair {
  int outer = -1;
  tcp::socket inner;
  explicit Pair(asio::io_context& io) : inner(io) {
    tcp::acceptor acc(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    tcp::socket client(io);
    client.connect(acc.local_endpoint());
    inner = acc.accept();
    outer = client.release();
  }
  ~Pair() {
    if (outer >= 0) {
      ::close(outer);
    }
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;
};

// Writes `total` pattern bytes in `piece`-sized sends (starting at pattern offset `from`), then
// half-closes if `fin`. Returns bytes written (less if the peer went away).
uint64_t send_pattern(int fd, uint64_t total, size_t piece, bool fin, uint64_t from = 0) {
  std::vector<char> buf(piece);
  uint64_t sent = 0;
  while (sent < total) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(piece, total - sent));
    for (size_t i = 0; i < n; ++i) {
      buf[i] = pattern(from + sent + i);
    }
    size_t off = 0;
    while (off < n) {
      ssize_t w = ::send(fd, buf.data() + off, n - off, MSG_NOSIGNAL);
      if (w <= 0) {
        return sent + off;
      }
      off += static_cast<size_t>(w);
    }
    sent += n;
  }
  if (fin) {
    ::shutdown(fd, SHUT_WR);
  }
  return sent;
}

struct ReadResult {
  uint64_t bytes = 0;
  uint64_t first_bad = UINT64_MAX;  // offset of the first byte that differs from the pattern
  bool eof = false;                 // the stream ended with FIN (or reset) before the deadline
};

// Reads until EOF, an error or 60 s, checking every byte; `slow` reads 4 KiB at a time with a
// pause now and then, so that the pump meets a full socket (backpressure).
ReadResult read_pattern(int fd, bool slow) {
  ReadResult r;
  std::vector<char> buf(slow ? 4096 : 1 << 20);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  uint64_t reads = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) {
      continue;
    }
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) {
      r.eof = true;
      return r;
    }
    for (ssize_t i = 0; i < n && r.first_bad == UINT64_MAX; ++i) {
      if (buf[i] != pattern(r.bytes + i)) {
        r.first_bad = r.bytes + i;
      }
    }
    r.bytes += static_cast<uint64_t>(n);
    if (slow && ++reads % 64 == 0) {
      std::this_thread::sleep_for(1ms);
    }
  }
  return r;
}

class Splice : public ::testing::Test {
 protected:
  // Runs one pump from `from` to `to` to its end (60 s at most) and returns how it ended.
  PumpEnd run_pump(tcp::socket& from, tcp::socket& to, std::optional<uint64_t> limit,
                   bool outbound) {
    std::optional<PumpEnd> end;
    asio::co_spawn(io_, pump(ctx_, from, to, limit, outbound, {&written_, &last_}),
                   [&](std::exception_ptr e, PumpEnd r) {
                     EXPECT_FALSE(e);
                     end = r;
                   });
    io_.run_for(60s);
    io_.restart();
    EXPECT_TRUE(end) << "the pump did not finish within 60 s";
    return end.value_or(PumpEnd::ReadError);
  }

  asio::io_context io_;
  policy::NetworkPolicy policy_;
  record::EventLog events_;
  Context ctx_{io_, policy_, events_};
  uint64_t written_ = 0;
  Clock::time_point last_{};
};

// 64 MiB to a reader that takes 4 KiB at a time: every byte arrives once, in order, and the
// counts (delivered, charged to the budget) are exact.
TEST_F(Splice, LargeTransferToSlowReaderIsExact) {
  Pair up(io_), client(io_);
  constexpr uint64_t kTotal = 64ull << 20;
  std::thread sender([&] { EXPECT_EQ(send_pattern(up.outer, kTotal, 100'000, true), kTotal); });
  ReadResult got;
  std::thread reader([&] { got = read_pattern(client.outer, true); });
  EXPECT_EQ(run_pump(up.inner, client.inner, std::nullopt, false), PumpEnd::Eof);
  client.inner.shutdown(tcp::socket::shutdown_send);  // as a tunnel passes the FIN on
  sender.join();
  reader.join();
  EXPECT_EQ(got.bytes, kTotal);
  EXPECT_EQ(got.first_bad, UINT64_MAX) << "first wrong byte at offset " << got.first_bad;
  EXPECT_TRUE(got.eof);
  EXPECT_EQ(written_, kTotal);
  EXPECT_EQ(ctx_.caps.bytes_in(), kTotal);
  EXPECT_EQ(ctx_.caps.bytes_out(), 0u);
  EXPECT_NE(last_, Clock::time_point{});
}

// A known-length body followed at once by the next message's bytes: the pump moves exactly the
// body and leaves the rest unread in the socket (for the HTTP parser).
TEST_F(Splice, LimitReadsNotOneByteMore) {
  Pair up(io_), client(io_);
  constexpr uint64_t kBody = 5'000'001;
  constexpr uint64_t kNext = 300'000;
  // Everything is sent before the pump starts reading, so that the next message's bytes sit in
  // the same socket queue as the body's tail.
  std::thread sender([&] { send_pattern(up.outer, kBody + kNext, 65'536, false); });
  ReadResult got;
  std::thread reader([&] { got = read_pattern(client.outer, false); });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(run_pump(up.inner, client.inner, kBody, true), PumpEnd::Limit);
  EXPECT_EQ(written_, kBody);
  EXPECT_EQ(ctx_.caps.bytes_out(), kBody);
  client.inner.shutdown(tcp::socket::shutdown_send);
  reader.join();
  EXPECT_EQ(got.bytes, kBody);
  EXPECT_EQ(got.first_bad, UINT64_MAX);
  // The bytes after the body are still there, starting exactly where the body ended.
  std::vector<char> rest(kNext);
  boost::system::error_code ec;
  up.inner.non_blocking(false, ec);
  size_t n = asio::read(up.inner, asio::buffer(rest), ec);
  sender.join();
  ASSERT_EQ(n, kNext) << ec.message();
  for (uint64_t i = 0; i < kNext; ++i) {
    ASSERT_EQ(rest[i], pattern(kBody + i)) << "offset " << kBody + i;
  }
}

// The session's inbound budget runs out in the middle of a body: exactly the budget is delivered
// and charged, and the pump reports Budget (not Eof) because more bytes were coming.
TEST_F(Splice, BudgetReachedMidBodyCutsAtExactlyTheBudget) {
  constexpr uint64_t kBudget = 3'000'017;
  policy_.max_bytes_in = kBudget;
  Pair up(io_), client(io_);
  std::thread sender([&] { send_pattern(up.outer, 8ull << 20, 65'536, false); });
  ReadResult got;
  std::thread reader([&] { got = read_pattern(client.outer, true); });
  EXPECT_EQ(run_pump(up.inner, client.inner, 8ull << 20, false), PumpEnd::Budget);
  EXPECT_EQ(written_, kBudget);
  EXPECT_EQ(ctx_.caps.bytes_in(), kBudget);
  // What a tunnel does on Budget: cut both sides.
  boost::system::error_code ec;
  client.inner.close(ec);
  up.inner.close(ec);
  sender.join();
  reader.join();
  EXPECT_EQ(got.bytes, kBudget);
  EXPECT_EQ(got.first_bad, UINT64_MAX);
}

// A body that ends exactly at the budget, followed by FIN: the FIN is not "a byte beyond it".
TEST_F(Splice, BudgetSpentExactlyThenFinIsEof) {
  constexpr uint64_t kBudget = 1'000'000;
  policy_.max_bytes_out = kBudget;
  Pair client(io_), up(io_);
  std::thread sender([&] { send_pattern(client.outer, kBudget, 40'000, true); });
  ReadResult got;
  std::thread reader([&] { got = read_pattern(up.outer, false); });
  EXPECT_EQ(run_pump(client.inner, up.inner, std::nullopt, true), PumpEnd::Eof);
  up.inner.shutdown(tcp::socket::shutdown_send);
  sender.join();
  reader.join();
  EXPECT_EQ(got.bytes, kBudget);
  EXPECT_TRUE(got.eof);
  EXPECT_EQ(ctx_.caps.bytes_out(), kBudget);
}

// Half-close: the client's FIN ends the outbound pump (and is passed on), while the inbound pump
// keeps delivering the upstream's answer, which is sent only after the upstream saw that FIN.
TEST_F(Splice, HalfCloseKeepsTheOtherDirectionFlowing) {
  Pair client(io_), up(io_);
  constexpr uint64_t kRequest = 2'000'000;
  constexpr uint64_t kAnswer = 6'000'000;
  uint64_t out_written = 0, in_written = 0;
  Clock::time_point last{};
  std::optional<PumpEnd> out_end, in_end;
  asio::co_spawn(io_, pump(ctx_, client.inner, up.inner, std::nullopt, true, {&out_written, &last}),
                 [&](std::exception_ptr, PumpEnd r) {
                   out_end = r;
                   up.inner.shutdown(tcp::socket::shutdown_send);  // pass the FIN on
                 });
  asio::co_spawn(io_, pump(ctx_, up.inner, client.inner, std::nullopt, false, {&in_written, &last}),
                 [&](std::exception_ptr, PumpEnd r) {
                   in_end = r;
                   client.inner.shutdown(tcp::socket::shutdown_send);
                 });
  // The upstream: reads the whole request up to EOF, then answers and closes.
  ReadResult request;
  std::thread upstream([&] {
    request = read_pattern(up.outer, false);
    send_pattern(up.outer, kAnswer, 50'000, true);
  });
  ReadResult answer;
  std::thread program([&] {
    send_pattern(client.outer, kRequest, 30'000, true);
    answer = read_pattern(client.outer, true);
  });
  io_.run_for(60s);
  upstream.join();
  program.join();
  ASSERT_TRUE(out_end && in_end);
  EXPECT_EQ(*out_end, PumpEnd::Eof);
  EXPECT_EQ(*in_end, PumpEnd::Eof);
  EXPECT_EQ(request.bytes, kRequest);
  EXPECT_TRUE(request.eof);
  EXPECT_EQ(answer.bytes, kAnswer);
  EXPECT_EQ(answer.first_bad, UINT64_MAX);
  EXPECT_TRUE(answer.eof);
  EXPECT_EQ(out_written, kRequest);
  EXPECT_EQ(in_written, kAnswer);
  EXPECT_EQ(ctx_.caps.bytes_out(), kRequest);
  EXPECT_EQ(ctx_.caps.bytes_in(), kAnswer);
}

// A pump waiting for bytes holds no pipe: after a burst, the pipe it used is back in the pool.
TEST_F(Splice, IdlePumpHoldsNoPipe) {
  Pair client(io_), up(io_);
  std::optional<PumpEnd> end;
  asio::co_spawn(io_, pump(ctx_, client.inner, up.inner, std::nullopt, true, {&written_, &last_}),
                 [&](std::exception_ptr, PumpEnd r) { end = r; });
  ASSERT_EQ(send_pattern(client.outer, 1'000'000, 100'000, false), 1'000'000u);
  ReadResult got;
  std::thread reader([&] { got = read_pattern(up.outer, false); });
  // Run until the burst is through and the pump waits again.
  for (int i = 0; i < 600 && written_ < 1'000'000; ++i) {
    io_.run_for(100ms);
  }
  io_.run_for(100ms);
  EXPECT_EQ(written_, 1'000'000u);
  EXPECT_FALSE(end);
  EXPECT_EQ(ctx_.pipes.idle(), 1u) << "the pipe was not given back while the pump waits";
  ::shutdown(client.outer, SHUT_WR);
  io_.run_for(5s);
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, PumpEnd::Eof);
  up.inner.shutdown(tcp::socket::shutdown_send);
  reader.join();
  EXPECT_EQ(got.bytes, 1'000'000u);
}

}  // namespace
}  // namespace cordon::netproxy
