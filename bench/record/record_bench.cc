// ns per event through EventLog, with the record's limits on (a cap far away, a rate far above the
// load: every event is written, so only the checks themselves are measured) and off. Two paths:
// emit() (a JSON object built and dumped: launcher, cordon-fs, the shim's collector) and append()
// of a line built beforehand (netproxy's hand-built hot events), where the checks weigh most.
// Then the hash chain's own cost (chain_round_ns): under flock(2) and through the record's head.
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
#include "record/chain_head.h"
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

// How the chained rounds exclude the other writers.
enum class Chain { kPlain, kFlock, kHead };

// The hash chain alone, in ns per event: one line appended with a plain write(2) (as before the
// chain) against the same object sealed and appended by ChainWriters, either under flock(2) (fstat,
// and the previous chain value read back from the file when another writer wrote last) or through
// the record's head (its mutex, lseek, the chain value kept in the head). `writers` writers on
// their own opens take turns, so with 2 every line follows another writer's.
double chain_round_ns(const std::string& path, long n, Chain how, int writers, double* cpu_ns) {
  ::unlink(path.c_str());
  const std::string head_path = path + std::string(cordon::record::kHeadSuffix);
  ::unlink(head_path.c_str());
  const std::string object =
      R"({"client":"10.0.2.1:40000","kind":"net.http","method":"GET","name":"api.test",)"
      R"("port":80,"session":"20261126-120000-abcdef","source":"netproxy","status":200,)"
      R"("ts":"2026-11-26T12:00:00.000000Z","url":"http://api.test/x"})";
  std::vector<cordon::UniqueFd> fds;
  std::vector<std::unique_ptr<cordon::record::ChainWriter>> ws;
  for (int w = 0; w < writers; ++w) {
    fds.emplace_back(::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
    std::unique_ptr<cordon::record::ChainHead> head;
    if (how == Chain::kHead) {
      auto fd = cordon::record::open_head_file(AT_FDCWD, head_path);
      auto mapped =
          fd.ok() ? cordon::record::ChainHead::map(std::move(fd).value()) : std::move(fd).error();
      if (!mapped.ok()) {
        std::fprintf(stderr, "%s\n", mapped.error().to_string().c_str());
        std::exit(1);
      }
      head = std::move(mapped).value();
    }
    ws.push_back(std::make_unique<cordon::record::ChainWriter>(std::move(head)));
  }
  const std::string plain =
      object + std::string(cordon::record::kSealOverhead - 1, ' ') + "\n";  // same size
  double t0 = now_s();
  double c0 = cpu_s();
  for (long i = 0; i < n; ++i) {
    const size_t w = static_cast<size_t>(i % writers);
    if (how == Chain::kPlain) {
      if (::write(fds[w].get(), plain.data(), plain.size()) != static_cast<ssize_t>(plain.size())) {
        std::exit(1);
      }
    } else if (!ws[w]->append(fds[w].get(), object).ok()) {
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
  // Rounds interleaved, medians reported: plain write(2), then each way of chaining with 1 and 2
  // writers, in wall time and in the process's CPU time.
  struct Config {
    const char* name;
    Chain how;
    int writers;
    std::vector<double> wall, cpu;
  };
  std::vector<Config> configs = {{"plain write(2)", Chain::kPlain, 1, {}, {}},
                                 {"flock chain, 1 writer", Chain::kFlock, 1, {}, {}},
                                 {"flock chain, 2 writers", Chain::kFlock, 2, {}, {}},
                                 {"head chain, 1 writer", Chain::kHead, 1, {}, {}},
                                 {"head chain, 2 writers", Chain::kHead, 2, {}, {}}};
  for (int r = 0; r < rounds; ++r) {
    for (Config& c : configs) {
      double cpu = 0;
      c.wall.push_back(chain_round_ns(path, n, c.how, c.writers, &cpu));
      c.cpu.push_back(cpu);
    }
  }
  const double plain_wall = median(configs[0].wall), plain_cpu = median(configs[0].cpu);
  std::printf("%-24s %10s %10s %10s %10s\n", "chain (ns/event)", "wall", "added", "cpu", "added");
  for (const Config& c : configs) {
    double wall = median(c.wall), cpu = median(c.cpu);
    std::printf("%-24s %10.0f %+10.0f %10.0f %+10.0f\n", c.name, wall, wall - plain_wall, cpu,
                cpu - plain_cpu);
  }
  return 0;
}
