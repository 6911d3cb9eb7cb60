// Connection caps and byte budgets, at their exact boundaries.
#include "netproxy/caps.h"

#include <gtest/gtest.h>

namespace cordon::netproxy {
namespace {

TEST(Caps, GlobalCapAdmitsExactlyNAndFreesOnRelease) {
  policy::NetworkPolicy p;
  p.max_connections = 2;
  Caps caps(p);
  ConnSlot a, b, c;
  EXPECT_FALSE(caps.admit("a.test", &a));
  EXPECT_FALSE(caps.admit("b.test", &b));
  auto r = caps.admit("c.test", &c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->cap, "network.max_connections");
  EXPECT_EQ(r->message, "cordon: connection cap network.max_connections (2) reached");
  a.release();
  EXPECT_FALSE(caps.admit("c.test", &c));
  EXPECT_EQ(caps.active(), 2u);
}

TEST(Caps, ZeroConnectionsMeansNone) {
  policy::NetworkPolicy p;
  p.max_connections = 0;
  Caps caps(p);
  ConnSlot s;
  EXPECT_TRUE(caps.admit("a.test", &s));
}

TEST(Caps, PerHostAndPerMinute) {
  policy::NetworkPolicy p;
  p.max_connections_per_host = 1;
  p.connections_per_minute = 3;
  Caps caps(p);
  auto t0 = Clock::now();
  ConnSlot a, b, c, d;
  EXPECT_FALSE(caps.admit("a.test", &a, t0));
  auto r = caps.admit("a.test", &b, t0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->cap, "network.max_connections_per_host");
  EXPECT_FALSE(caps.admit("b.test", &b, t0));
  EXPECT_FALSE(caps.admit("c.test", &c, t0));
  r = caps.admit("d.test", &d, t0 + std::chrono::seconds(59));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->cap, "network.connections_per_minute");
  // A minute after the first three, the window has room again (slots released meanwhile).
  a.release();
  b.release();
  c.release();
  EXPECT_FALSE(caps.admit("d.test", &d, t0 + std::chrono::seconds(60)));
}

TEST(Caps, ByteBudgetsPassExactlyTheBudget) {
  policy::NetworkPolicy p;
  p.max_bytes_out = 100;
  Caps caps(p);
  EXPECT_EQ(caps.take_out(60), 60u);
  EXPECT_EQ(caps.take_out(60), 40u);  // the rest of the budget, then the cut
  EXPECT_EQ(caps.take_out(1), 0u);
  EXPECT_EQ(caps.take_in(1000000), 1000000u);  // max_bytes_in 0 = unlimited
  ConnSlot s;
  auto r = caps.admit("a.test", &s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->cap, "network.max_bytes_out");
}

}  // namespace
}  // namespace cordon::netproxy
