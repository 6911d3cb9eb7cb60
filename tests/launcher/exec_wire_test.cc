// exec_wire: what `cordon exec` sends round-trips, and bytes it cannot have sent are refused.
#include "launcher/exec_wire.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

namespace cordon::launcher {
namespace {

TEST(ExecWire, ARequestRoundTrips) {
  ExecRequest r;
  r.argv = {"sh", "-c", "echo 'a b'", ""};
  r.env = {"A=1", "EMPTY="};
  r.cwd = "/work/dir with space";
  auto d = decode_request(encode_request(r));
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->op, ControlOp::Exec);
  EXPECT_EQ(d->argv, r.argv);
  EXPECT_EQ(d->env, r.env);
  EXPECT_EQ(d->cwd, r.cwd);
  ExecRequest stop;
  stop.op = ControlOp::Stop;
  auto s = decode_request(encode_request(stop));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->op, ControlOp::Stop);
}

TEST(ExecWire, BytesItCannotHaveWrittenAreRefused) {
  using namespace std::string_literals;
  EXPECT_FALSE(decode_request("").ok());                       // no operation
  EXPECT_FALSE(decode_request("ox\0"s).ok());                  // an exec without argv
  EXPECT_FALSE(decode_request("ox\0a\0"s).ok());               // an empty program name
  EXPECT_FALSE(decode_request("ox\0als"s).ok());               // no terminator
  EXPECT_FALSE(decode_request("oz\0als\0"s).ok());             // unknown operation
  EXPECT_FALSE(decode_request("ox\0als\0qfoo\0"s).ok());       // unknown field
  EXPECT_FALSE(decode_request("ox\0als\0eNOEQUALS\0"s).ok());  // env without '='
  EXPECT_FALSE(decode_request("ox\0als\0e=value\0"s).ok());    // env without a name
  EXPECT_TRUE(decode_request("ox\0als\0eK=v=w\0c/\0"s).ok());
  EXPECT_FALSE(decode_request("ok\0n0\0"s).ok());   // signal 0
  EXPECT_FALSE(decode_request("ok\0n65\0"s).ok());  // past the last signal
  EXPECT_FALSE(decode_request("ok\0n-1\0"s).ok());
  EXPECT_FALSE(decode_request("ok\0"s).ok());  // no signal at all
  auto k = decode_request("ok\0n15\0"s);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->signal, 15);
  EXPECT_FALSE(decode_report("short").ok());
}

TEST(ExecWire, APacketOverTheBoundIsRefusedAndItsFdsClosed) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  int fds[1] = {0};
  ASSERT_TRUE(send_packet(a.get(), std::string(100, 'x'), fds, 1).ok());
  auto big = recv_packet(b.get(), 99, 0);
  EXPECT_FALSE(big.ok());
  ASSERT_TRUE(send_packet(a.get(), "ok", fds, 1).ok());
  auto p = recv_packet(b.get(), 99, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->bytes, "ok");
  ASSERT_EQ(p->fds.size(), 1u);
  EXPECT_GE(p->fds[0].get(), 0);
  a.reset();
  auto end = recv_packet(b.get(), 99, 0);
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(end->eof);
}

}  // namespace
}  // namespace cordon::launcher
