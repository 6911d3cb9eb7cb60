// SinkNetns: DESIGN.md's "Test hosts" fixture. Routes the documentation ranges (198.51.100.0/24,
// 203.0.113.0/24, 2001:db8::/32) on the host into a sink network namespace reached over a veth
// pair, where nftables counters record whatever arrives. A test that aims at those addresses
// asserts hits() == 0: a leak is caught and counted, and nothing reaches the real uplink.
// Needs root. Fixtures in concurrent test processes serialise on a lock file, since the routes
// are host-global.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "tests/support/subprocess.h"

namespace cordon::testing {

class SinkNetns {
 public:
  SinkNetns() {
    lock_fd_ = ::open("/run/cordon-test-sink.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ >= 0) {
      ::flock(lock_fd_, LOCK_EX);
    }
    std::string tag = std::to_string(::getpid() % 100000);
    ns_ = "cordon-sink-" + tag;
    host_if_ = "csk" + tag + "h";
    sink_if_ = "csk" + tag + "s";
    teardown();  // a previous crashed run may have left it behind
    ok_ = sh("ip netns add " + ns_) &&
          sh("ip link add " + host_if_ + " type veth peer name " + sink_if_ + " address " +
             kSinkMac + " netns " + ns_) &&
          sh("ip link set " + host_if_ + " up") && sh(in_ns("ip link set lo up")) &&
          sh(in_ns("ip link set " + sink_if_ + " up")) &&
          sh(in_ns("ip addr add 198.51.100.254/24 dev " + sink_if_)) &&
          sh(in_ns("ip addr add 203.0.113.254/24 dev " + sink_if_)) &&
          sh(in_ns("ip -6 addr add 2001:db8::fffe/32 dev " + sink_if_ + " nodad")) &&
          sh(in_ns("nft -f -"),
             "table inet sink {\n"
             "  counter leaked {}\n"
             "  chain pre { type filter hook prerouting priority -300; policy accept;\n"
             "    ip daddr { 198.51.100.0/24, 203.0.113.0/24 } counter name leaked\n"
             "    ip6 daddr 2001:db8::/32 counter name leaked\n"
             "  }\n"
             "}\n") &&
          // Via the sink's own address, on-link: the host resolves only that neighbour, so every
          // address of the ranges lands in the sink, which accepts them all through local routes.
          sh(in_ns("ip route add local 198.51.100.0/24 dev lo")) &&
          sh(in_ns("ip route add local 203.0.113.0/24 dev lo")) &&
          sh(in_ns("ip -6 route add local 2001:db8::/32 dev lo")) &&
          // Static neighbours: no ARP/ND (and no IPv6 DAD wait) before the first packet can land.
          sh("ip neigh replace 198.51.100.254 lladdr " + std::string(kSinkMac) + " dev " +
             host_if_ + " nud permanent") &&
          sh("ip -6 neigh replace 2001:db8::fffe lladdr " + std::string(kSinkMac) + " dev " +
             host_if_ + " nud permanent") &&
          sh("ip route replace 198.51.100.0/24 via 198.51.100.254 dev " + host_if_ + " onlink") &&
          sh("ip route replace 203.0.113.0/24 via 198.51.100.254 dev " + host_if_ + " onlink") &&
          sh("ip -6 route replace 2001:db8::/32 via 2001:db8::fffe dev " + host_if_ + " onlink");
  }
  ~SinkNetns() {
    teardown();
    if (lock_fd_ >= 0) {
      ::close(lock_fd_);
    }
  }
  SinkNetns(const SinkNetns&) = delete;
  SinkNetns& operator=(const SinkNetns&) = delete;

  // Whether the fixture is fully in place; a test must not aim at the ranges otherwise.
  bool ok() const { return ok_; }
  // Packets that arrived in the sink addressed to the documentation ranges; -1 if unreadable.
  long hits() const { return count("leaked"); }
  // Counts, from now on, the packets addressed to `ip` alone (IPv4 or IPv6 of the ranges).
  // hits() counts whatever the routes catch, and this machine's own traffic may be among it
  // (here deb.debian.org is 203.0.113.80: an apt run meanwhile lands in the sink): a test that
  // aims at one address can assert on that address. False if the counter could not be added.
  bool watch(const std::string& ip) {
    std::string family = ip.find(':') == std::string::npos ? "ip" : "ip6";
    std::string counter = counter_of(ip);
    return sh(in_ns("nft add counter inet sink " + counter)) &&
           sh(in_ns("nft insert rule inet sink pre " + family + " daddr " + ip + " counter name " +
                    counter));
  }
  // Packets addressed to `ip` since watch(ip); -1 if unreadable.
  long hits_to(const std::string& ip) const { return count(counter_of(ip)); }
  const std::string& name() const { return ns_; }

 private:
  std::string in_ns(const std::string& cmd) const { return "ip netns exec " + ns_ + " " + cmd; }
  static std::string counter_of(const std::string& ip) {
    std::string c = "to_";
    for (char ch : ip) {
      c += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
    }
    return c;
  }
  long count(const std::string& counter) const {
    auto r = run_program(
        {"ip", "netns", "exec", ns_, "nft", "list", "counter", "inet", "sink", counter});
    auto pos = r.out.find("packets ");
    if (r.exit_code() != 0 || pos == std::string::npos) {
      return -1;
    }
    return std::strtol(r.out.c_str() + pos + 8, nullptr, 10);
  }
  static bool sh(const std::string& cmd, const std::string& input = {}) {
    RunSpec spec;
    spec.stdin_data = input;
    spec.deadline = std::chrono::seconds(20);
    return run_program({"/bin/sh", "-c", cmd}, spec).exit_code() == 0;
  }
  void teardown() {
    sh("ip route del 198.51.100.0/24 dev " + host_if_ +
       " 2>/dev/null; "
       "ip route del 203.0.113.0/24 dev " +
       host_if_ +
       " 2>/dev/null; "
       "ip -6 route del 2001:db8::/32 dev " +
       host_if_ +
       " 2>/dev/null; "
       "ip link del " +
       host_if_ + " 2>/dev/null; ip netns del " + ns_ + " 2>/dev/null; true");
  }

  static constexpr const char* kSinkMac = "02:c0:4d:00:00:01";
  int lock_fd_ = -1;
  bool ok_ = false;
  std::string ns_, host_if_, sink_if_;
};

}  // namespace cordon::testing
