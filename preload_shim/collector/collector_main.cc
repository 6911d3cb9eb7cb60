// cordon-shim-collector SOCKET EVENTS_JSONL [SESSION]: a standalone collector (benchmarks,
// debugging, shim-only setups). Runs until SIGINT/SIGTERM, then prints its counters.
#include <signal.h>
#include <sys/signalfd.h>

#include <cstdio>

#include "preload_shim/collector/collector.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SOCKET EVENTS_JSONL [SESSION]\n", argv[0]);
    return 2;
  }
  // The default policy's bounds on the record, as in a cordon session.
  auto log = cordon::record::EventLog::open(
      argv[2], argc > 3 ? argv[3] : "", "shim",
      cordon::record::RecordLimits::from(cordon::policy::RecordPolicy{}));
  if (!log.ok()) {
    std::fprintf(stderr, "cordon-shim-collector: %s\n", log.error().to_string().c_str());
    return 1;
  }
  auto collector = cordon::preload_shim::Collector::listen(argv[1], std::move(log).value());
  if (!collector.ok()) {
    std::fprintf(stderr, "cordon-shim-collector: %s\n", collector.error().to_string().c_str());
    return 1;
  }
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  cordon::UniqueFd stop(signalfd(-1, &mask, SFD_CLOEXEC));
  std::printf("ready\n");
  std::fflush(stdout);
  auto st = (*collector)->run(stop.get());
  const auto& s = (*collector)->stats();
  std::printf("events=%llu dropped=%llu malformed=%llu connections=%llu\n",
              static_cast<unsigned long long>(s.events.load()),
              static_cast<unsigned long long>(s.dropped.load()),
              static_cast<unsigned long long>(s.malformed.load()),
              static_cast<unsigned long long>(s.connections.load()));
  if (!st.ok()) {
    std::fprintf(stderr, "cordon-shim-collector: %s\n", st.error().to_string().c_str());
    return 1;
  }
  return 0;
}
