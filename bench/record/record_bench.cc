// ns per event through EventLog, with the record's limits on (a cap far away, a rate far above the
// load: every event is written, so only the checks themselves are measured) and off. Two paths:
// emit() (a JSON object built and dumped: launcher, cordon-fs, the shim's collector) and append()
// of a line built beforehand (netproxy's hand-built hot events), where the checks weigh most.
// Then the hash chain's own cost (chain_round_ns).
//   cordon-bench-record DIR [EVENTS] [ROUNDS]: DIR on a tmpfs; prints one line per configuration
//   with the median over ROUNDS interleaved rounds.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "record/chain.h"
#include "record/chain_writer.h"
#include "record/events.h"

namespace {

using cordon::record::EventLog;
using cordon::record::RecordLimits;

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// The process's CPU time (user + system): on a machine shared with other work, wall time also
// counts the time the scheduler gave to others.
double cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// One round: `n` fs.refused events of a typical shape, in ns per event.
double round_ns(const std::string& path, const RecordLimits& limits, long n, bool prebuilt) {
  ::unlink(path.c_str());
  auto log = EventLog::open(path, "20261126-120000-abcdef", "fusefs", limits);
  if (!log.ok()) {
    std::fprintf(stderr, "%s\n", log.error().to_string().c_str());
    std::exit(1);
  }
  const std::string line =
      R"({"client":"10.0.2.1:40000","kind":"net.http","method":"GET","name":"api.test",)"
      R"("port":80,"session":"20261126-120000-abcdef","source":"netproxy","status":200,)"
      R"("ts":"2026-11-26T12:00:00.000000Z","url":"http://api.test/x"})"
      "\n";
  double t0 = now_s();
  for (long i = 0; i < n && prebuilt; ++i) {
    (void)log->append("net.http", line);
  }
  for (long i = 0; i < n && !prebuilt; ++i) {
    (void)log->emit("fs.refused", {{"decision", "deny"},
                                   {"rule", "filesystem.deny[11]"},
                                   {"path", ".env"},
                                   {"op", "lookup"},
                                   {"pid", 23090 + (i & 7)},
                                   {"exe", "/usr/bin/python3.11"}});
  }
  double t = now_s() - t0;
  if (log->dropped() != 0) {
    std::fprintf(stderr, "dropped %llu: the limits must not bind in this benchmark\n",
                 static_cast<unsigned long long>(log->dropped()));
    std::exit(1);
  }
  return t / n * 1e9;
}

// The hash chain alone, in ns per event: one line appended with a plain write(2) (as before the
// chain) against the same object sealed and appended by a ChainWriter (flock, fstat, SHA-256,
// write). `writers` ChainWriters on their own opens take turns, so with 2 every line follows
// another writer's and the previous chain value is read back from the file.
double chain_round_ns(const std::string& path, long n, int writers, double* cpu_ns) {
  ::unlink(path.c_str());
  const std::string object =
      R"({"client":"10.0.2.1:40000","kind":"net.http","method":"GET","name":"api.test",)"
      R"("port":80,"session":"20261126-120000-abcdef","source":"netproxy","status":200,)"
      R"("ts":"2026-11-26T12:00:00.000000Z","url":"http://api.test/x"})";
  std::vector<cordon::UniqueFd> fds;
  std::vector<std::unique_ptr<cordon::record::ChainWriter>> ws;
  for (int w = 0; w < std::max(writers, 1); ++w) {
    fds.emplace_back(::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
    ws.push_back(std::make_unique<cordon::record::ChainWriter>());
  }
  const std::string plain =
      object + std::string(cordon::record::kSealOverhead - 1, ' ') + "\n";  // same size
  double t0 = now_s();
  double c0 = cpu_s();
  for (long i = 0; i < n; ++i) {
    if (writers == 0) {
      if (::write(fds[0].get(), plain.data(), plain.size()) != static_cast<ssize_t>(plain.size())) {
        std::exit(1);
      }
    } else if (!ws[i % writers]->append(fds[i % writers].get(), object).ok()) {
      std::exit(1);
    }
  }
  *cpu_ns = (cpu_s() - c0) / n * 1e9;
  return (now_s() - t0) / n * 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [EVENTS] [ROUNDS]\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  long n = argc > 2 ? std::atol(argv[2]) : 200000;
  int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
  // A cap the run cannot reach and a rate it cannot exceed: the limiter checks, never drops.
  const RecordLimits on{64ull << 30, 1000000000};
  const RecordLimits off{};
  const std::string path = dir + "/events.jsonl";
  for (bool prebuilt : {false, true}) {
    std::vector<double> with, without;
    for (int r = 0; r < rounds; ++r) {
      without.push_back(round_ns(path, off, n, prebuilt));
      with.push_back(round_ns(path, on, n, prebuilt));
    }
    double a = median(without), b = median(with);
    std::printf("%-7s %8.0f ns/event without limits, %8.0f with: %+5.0f ns (%+.1f%%)\n",
                prebuilt ? "append" : "emit", a, b, b - a, (b - a) / a * 100);
  }
  std::vector<double> plain, one, two, plain_cpu, one_cpu, two_cpu;
  for (int r = 0; r < rounds; ++r) {
    double cpu = 0;
    plain.push_back(chain_round_ns(path, n, 0, &cpu));
    plain_cpu.push_back(cpu);
    one.push_back(chain_round_ns(path, n, 1, &cpu));
    one_cpu.push_back(cpu);
    two.push_back(chain_round_ns(path, n / 4, 2, &cpu));
    two_cpu.push_back(cpu);
  }
  for (bool cpu : {false, true}) {
    double a = median(cpu ? plain_cpu : plain), b = median(cpu ? one_cpu : one),
           c = median(cpu ? two_cpu : two);
    std::printf(
        "chain   %s: %6.0f ns/event plain write(2), %6.0f chained (%+5.0f ns); two writers "
        "taking turns: %6.0f (%+5.0f ns)\n",
        cpu ? "cpu " : "wall", a, b, b - a, c, c - a);
  }
  return 0;
}
