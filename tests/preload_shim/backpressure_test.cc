// A collector that never reads: the program must not stall, and every event it could not send is
// counted and reported with the next event that fits.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <thread>

#include "preload_shim/collector/decode.h"
#include "preload_shim/wire.h"
#include "tests/preload_shim/shim_fixture.h"

namespace cordon::testing {
namespace {

// Reads every queued message on `conn`; returns (messages, sum of dropped_before, kinds).
struct Drained {
  uint64_t messages = 0;
  uint64_t dropped = 0;
  uint64_t connects_to_4242 = 0;
};

void drain(int conn, Drained* d) {
  uint8_t buf[preload_shim::wire::kMaxMessage];
  for (;;) {
    ssize_t n = recv(conn, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) {
      return;
    }
    auto ev = preload_shim::decode_message(buf, static_cast<size_t>(n), {});
    ASSERT_TRUE(ev.ok()) << ev.error().to_string();
    ++d->messages;
    d->dropped += ev->value("dropped_before", 0u);
    if (ev->value("remote", "") == "127.0.0.1:4242") {
      ++d->connects_to_4242;
    }
  }
}

TEST(ShimBackpressure, UnreadCollectorNeitherStallsNorLosesCount) {
  TempDir dir;
  std::string sock_path = dir / "shim.sock";
  // A raw listener that accepts nothing: the shim's connection waits in the backlog and its send
  // buffer fills after a few hundred messages.
  UniqueFd listener(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock_path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener.get(), 16), 0);

  constexpr long kRounds = 100000;  // 100k connects + 100k opens, each one an event
  std::string marker = dir / "flood";
  RunSpec spec;
  spec.env = base_env({"LD_PRELOAD=" + shim_library(), "CORDON_SHIM_SOCK=" + sock_path,
                       "CORDON_SHIM_FS_EVENTS=all", "CORDON_SHIM_CONNECT_EVENTS=all"});
  spec.deadline = std::chrono::seconds(240);
  RunResult r;
  std::thread runner([&] {
    r = run_program({shim_program("shim_flood"), std::to_string(kRounds), marker}, spec);
  });

  // Phase 1 must finish with nobody reading (bounded wait, not a timing assertion).
  bool phase1 = false;
  for (int i = 0; i < 2400 && !phase1; ++i) {
    phase1 = access((marker + ".phase1").c_str(), F_OK) == 0;
    if (!phase1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_TRUE(phase1) << "the program stalled on a full event socket";

  Drained d;
  UniqueFd conn(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(conn.valid());
  drain(conn.get(), &d);
  uint64_t queued = d.messages;
  EXPECT_GT(queued, 0u);
  EXPECT_LT(queued, static_cast<uint64_t>(kRounds))
      << "nothing was dropped: the test proves nothing";

  // Let the program make its last call; that event carries the drop count.
  { UniqueFd go(open((marker + ".go").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644)); }
  runner.join();
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "done n=100000\n");
  // Read until the program's end of the connection closes (it exited).
  for (int i = 0; i < 100; ++i) {
    drain(conn.get(), &d);
    uint8_t probe;
    if (recv(conn.get(), &probe, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(d.connects_to_4242, 1u);
  // Exact accounting: the connection's hello + proc.start + 2 events per round + the marker's
  // open + the final connect, each either received or counted as dropped.
  EXPECT_EQ(d.messages + d.dropped, 1 + 1 + 2 * static_cast<uint64_t>(kRounds) + 1 + 1)
      << "messages=" << d.messages << " dropped=" << d.dropped;
  EXPECT_GT(d.dropped, 0u);
}

}  // namespace
}  // namespace cordon::testing
