// The leak catcher of DESIGN.md "Test hosts": routes a few documentation addresses on the host
// into a sink network namespace (a veth pair) where an nft counter counts every packet addressed
// to them. A test aims the sandbox at those addresses and asserts the counter stayed at zero;
// nothing can reach the real uplink because the host routes them into the veth. Root only.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace cordon::testing {

class EgressSink {
 public:
  // Addresses are chosen per process (198.51.100.X, 203.0.113.X, 2001:db8::X) so parallel test
  // processes do not fight over the same host routes.
  EgressSink() {
    static std::atomic<int> counter{0};
    // A few attempts: another test process may hold the same addresses' host routes.
    for (int attempt = 0; attempt < 8 && !ok_; ++attempt) {
      if (attempt > 0) {
        teardown();
      }
      int n = counter++;
      int x = 10 + (getpid() * 7 + n * 31) % 200;
      v4a_ = "198.51.100." + std::to_string(x);
      v4b_ = "203.0.113." + std::to_string(x);
      v6_ = "2001:db8::" + std::to_string(x);
      std::string tag = std::to_string(getpid() % 100000) + "x" + std::to_string(n);
      ns_ = "cordon-sink-" + tag;
      host_if_ = "csh" + tag;
      sink_if_ = "css" + tag;
      ok_ = setup();
    }
  }
  ~EgressSink() { teardown(); }
  EgressSink(const EgressSink&) = delete;
  EgressSink& operator=(const EgressSink&) = delete;

  bool ok() const { return ok_; }
  const std::string& v4a() const { return v4a_; }
  const std::string& v4b() const { return v4b_; }
  const std::string& v6() const { return v6_; }

  // Packets that reached the sink addressed to one of the addresses.
  long packets() const {
    auto r = run_program({"ip", "netns", "exec", ns_, "nft", "list", "table", "inet", "sink"});
    long total = 0;
    size_t pos = 0;
    while ((pos = r.out.find("counter packets ", pos)) != std::string::npos) {
      pos += 16;
      total += std::stol(r.out.substr(pos));
    }
    return total;
  }

 private:
  bool setup() {
    return sh("ip netns add " + ns_) &&
           sh("ip link add " + host_if_ + " type veth peer name " + sink_if_ + " netns " + ns_) &&
           sh("ip link set " + host_if_ + " up") && sh("ip -n " + ns_ + " link set lo up") &&
           sh("ip -n " + ns_ + " link set " + sink_if_ + " up") &&
           sh("ip -n " + ns_ + " addr add " + v4a_ + "/32 dev " + sink_if_) &&
           sh("ip -n " + ns_ + " addr add " + v4b_ + "/32 dev " + sink_if_) &&
           sh("ip -n " + ns_ + " -6 addr add " + v6_ + "/128 dev " + sink_if_ + " nodad") &&
           sh("ip route add " + v4a_ + "/32 dev " + host_if_) &&
           sh("ip route add " + v4b_ + "/32 dev " + host_if_) &&
           sh("ip -6 route add " + v6_ + "/128 dev " + host_if_) &&
           sh("ip netns exec " + ns_ +
              " nft -f - <<'EOF'\n"
              "table inet sink {\n"
              "  chain in {\n"
              "    type filter hook prerouting priority -300; policy accept;\n"
              "    ip daddr { " +
              v4a_ + ", " + v4b_ +
              " } counter\n"
              "    ip6 daddr " +
              v6_ +
              " counter\n"
              "  }\n"
              "}\nEOF");
  }
  void teardown() {
    sh("ip route del " + v4a_ + "/32 dev " + host_if_);
    sh("ip route del " + v4b_ + "/32 dev " + host_if_);
    sh("ip -6 route del " + v6_ + "/128 dev " + host_if_);
    sh("ip netns del " + ns_);  // takes the veth pair with it
  }
  static bool sh(const std::string& cmd) { return run_program({"sh", "-c", cmd}).exit_code() == 0; }
  std::string ns_, host_if_, sink_if_, v4a_, v4b_, v6_;
  bool ok_ = false;
};

}  // namespace cordon::testing
