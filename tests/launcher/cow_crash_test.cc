// kill -9 of `cordon` itself, or of the program, at random points of a heavy write workload in
// cow mode (through cordon-fs): every round, `cordon diff last --stat` and `cordon commit last`
// must work on what the kill left, and every file the commit put into the real workspace must be
// its state before the kill or what the op in flight could leave (tests/fusefs/write_model.h). The
// daemon's own kill is tests/fusefs/crash_test.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/fusefs/write_model.h"
#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

namespace fs = std::filesystem;
using write_model::allowed;
using write_model::append_record;
using write_model::FileState;
using write_model::OpKind;
using write_model::other_name;
using write_model::pattern;
using write_model::Pending;

bool fuse_usable() { return ::access("/dev/fuse", R_OK | W_OK) == 0; }

// The program: the ops of crash_test.cc in Python, each announced before it starts ("op ID KIND
// VERSION N": N is the new size for a replace, the record's filler length for an append) and
// confirmed once complete ("done"). With a kill delay it SIGKILLs itself from a timer thread,
// wherever the writing thread is.
constexpr const char* kWriter = R"PY(
import os, random, signal, sys, threading
seed, n, base, kill_ms = (int(a) for a in sys.argv[1:5])
rng = random.Random(seed)
def pattern(i, v, size):
    tag = ("<%d:%d>" % (i, v)).encode()
    return (tag * (size // len(tag) + 1))[:size]
name = {i: ("f%d" % i) if os.path.exists("f%d" % i) else ("g%d" % i) for i in range(n)}
size = {i: os.path.getsize(name[i]) for i in range(n)}
if kill_ms >= 0:
    threading.Timer(kill_ms / 1000, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
print("ready", flush=True)
for k in range(100000):
    i, kind, v = rng.randrange(n), rng.randrange(4), base + k
    arg = rng.randrange(512, 300 << 10) if kind == 0 else rng.randrange(20000) if kind == 2 else 0
    print("op %d %d %d %d" % (i, kind, v, arg), flush=True)
    if kind == 0:  # replace: temp file, fsync, rename over
        fd = os.open("t%d" % i, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, pattern(i, v, arg)); os.fsync(fd); os.close(fd)
        os.rename("t%d" % i, name[i]); size[i] = arg
    elif kind == 1:  # overwrite in place, same size
        fd = os.open(name[i], os.O_WRONLY)
        os.pwrite(fd, pattern(i, v, size[i]), 0); os.fsync(fd); os.close(fd)
    elif kind == 2:  # append one record
        rec = ("+%d" % v).encode() + bytes([ord("a") + i % 26]) * arg + b"\n"
        fd = os.open(name[i], os.O_WRONLY | os.O_APPEND)
        os.write(fd, rec); os.close(fd); size[i] += len(rec)
    else:  # rename f<->g
        other = ("g" if name[i][0] == "f" else "f") + name[i][1:]
        os.rename(name[i], other); name[i] = other
    print("done", flush=True)
)PY";

// Replays the program's log over `work`: completed ops applied (and counted in *done), the one
// announced but not confirmed returned as pending.
std::optional<Pending> replay(const std::string& log, std::vector<FileState>& work, size_t* done) {
  std::istringstream in(log);
  std::string word;
  std::optional<Pending> pending;
  while (in >> word) {
    if (word == "op") {
      size_t id = 0;
      int kind = 0, v = 0;
      size_t arg = 0;
      in >> id >> kind >> v >> arg;
      if (id >= work.size()) {
        ADD_FAILURE() << "bad op line in: " << log.substr(0, 200);
        return std::nullopt;
      }
      FileState after = work[id];
      switch (static_cast<OpKind>(kind)) {
        case OpKind::Replace:
          after.data = pattern(id, v, arg);
          break;
        case OpKind::Overwrite:
          after.data = pattern(id, v, after.data.size());
          break;
        case OpKind::Append:
          after.data += append_record(id, v, arg);
          break;
        case OpKind::Rename:
          after.name = other_name(after.name);
          break;
      }
      pending = Pending{id, static_cast<OpKind>(kind), after};
    } else if (word == "done" && pending) {
      work[pending->id] = pending->after;
      pending.reset();
      (*done)++;
    }
  }
  return pending;
}

TEST(CowCrash, KillOfCordonOrOfTheProgramLeavesOnlyModelStatesAndCommitWorks) {
  CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
  SandboxFixture f;
  uid_t uid = f.make_workspace_owned();
  constexpr size_t kFiles = 24;
  constexpr int kRounds = 6;
  std::vector<FileState> model(kFiles);
  for (size_t i = 0; i < kFiles; i++) {
    model[i] = {"f" + std::to_string(i), pattern(i, 0, 1024 + (i * 9973) % (300 << 10))};
    write_text(f.ws() + "/" + model[i].name, model[i].data);
    (void)!::chown((f.ws() + "/" + model[i].name).c_str(), uid, uid);
  }
  unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  int ops_in_flight = 0;
  for (int round = 0; round < kRounds; round++) {
    bool kill_cordon = round % 2 == 0;
    int delay_ms = 30 + static_cast<int>(rng() % 300);
    std::vector<std::string> argv = {cordon_bin(),
                                     "run",
                                     "-q",
                                     "--workspace",
                                     f.ws(),
                                     "--",
                                     "python3",
                                     "-c",
                                     kWriter,
                                     std::to_string(rng()),
                                     std::to_string(kFiles),
                                     std::to_string(1 + round * 100000),
                                     std::to_string(kill_cordon ? -1 : delay_ms)};
    Background bg(argv, f.env(), f.ws());
    ASSERT_NE(bg.read_until("ready\n").find("ready"), std::string::npos) << "round " << round;
    if (kill_cordon) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      ASSERT_EQ(::kill(bg.pid(), SIGKILL), 0);
    }
    bg.wait(std::chrono::seconds(60));
    std::vector<FileState> work = model;
    size_t done = 0;
    std::optional<Pending> pending = replay(bg.text(), work, &done);
    EXPECT_GT(done, 0u) << "round " << round << ": no op completed before the kill";
    // The session's cordon-fs may take a moment to go once cordon is gone: commit refuses a
    // running session, so ask until it is not (bounded).
    RunResult d;
    for (int i = 0; i < 100; i++) {
      d = run_program({cordon_bin(), "diff", "last", "--stat"},
                      RunSpec{.env = f.env(), .cwd = f.ws()});
      if (d.exit_code() == 0 || i == 99) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(d.exit_code(), 0) << "round " << round << ": " << d.err;
    EXPECT_NE(d.out.find(" in session "), std::string::npos) << "round " << round << ": " << d.out;
    RunResult c;
    for (int i = 0; i < 100; i++) {
      c = run_program({cordon_bin(), "commit", "last"}, RunSpec{.env = f.env(), .cwd = f.ws()});
      if (c.err.find("still running") == std::string::npos) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_EQ(c.exit_code(), 0) << "round " << round << ": " << c.err;
    // Temp files of an interrupted replace are the program's own files: committed, then dropped.
    for (size_t i = 0; i < kFiles; i++) {
      ::unlink((f.ws() + "/t" + std::to_string(i)).c_str());
    }
    for (size_t i = 0; i < kFiles; i++) {
      std::string a = f.ws() + "/" + work[i].name, b = f.ws() + "/" + other_name(work[i].name);
      bool has_a = ::access(a.c_str(), F_OK) == 0, has_b = ::access(b.c_str(), F_OK) == 0;
      ASSERT_NE(has_a, has_b) << "round " << round << " file " << i << ": " << work[i].name
                              << (has_a ? " and its other name both exist" : " is gone");
      FileState seen{has_a ? work[i].name : other_name(work[i].name), read_text(has_a ? a : b)};
      std::optional<Pending> p = pending && pending->id == i ? pending : std::nullopt;
      ops_in_flight += p ? 1 : 0;
      ASSERT_TRUE(allowed(seen, work[i], p))
          << "round " << round << " (" << (kill_cordon ? "cordon" : "the program")
          << " killed) file " << i << " (" << seen.name << ", " << seen.data.size()
          << " bytes) is neither its state before the kill (" << work[i].name << ", "
          << work[i].data.size() << " bytes) nor what the op in flight could leave";
      model[i] = seen;
    }
    // Nothing else came into the workspace.
    size_t entries = 0;
    for (const auto& e : fs::directory_iterator(f.ws())) {
      (void)e;
      entries++;
    }
    EXPECT_EQ(entries, kFiles) << "round " << round;
  }
  std::printf("rounds: %d, files with an op in flight at a kill: %d\n", kRounds, ops_in_flight);
}

}  // namespace
}  // namespace cordon::testing
