// Shared test fixture for the preload shim: a real collector on a temp socket, run on a thread,
// and the environment that injects the built libcordon_preload.so into a program.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "preload_shim/collector/collector.h"
#include "record/events.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_env.h"

extern char** environ;

namespace cordon::testing {

inline std::string shim_library() { return build_path("preload_shim/libcordon_preload.so"); }
inline std::string shim_program(const std::string& name) {
  return build_path("tests/preload_shim/" + name);
}

// The current environment minus anything shim-related, plus `extra` ("K=V").
inline std::vector<std::string> base_env(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.rfind("LD_PRELOAD=", 0) == 0 || kv.rfind("CORDON_SHIM_", 0) == 0 ||
        kv.rfind("CORDON_SESSION=", 0) == 0) {
      continue;
    }
    env.push_back(kv);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

class ShimSession {
 public:
  ShimSession() : events_path_(dir_ / "events.jsonl"), socket_path_(dir_ / "shim.sock") {
    auto log = record::EventLog::open(events_path_, "test-session", "shim", {});
    EXPECT_TRUE(log.ok());
    auto c = preload_shim::Collector::listen(socket_path_, std::move(log).value());
    if (!c.ok()) {
      ADD_FAILURE() << c.error().to_string();
      return;
    }
    collector_ = std::move(c).value();
    stop_.reset(eventfd(0, EFD_CLOEXEC));
    thread_ = std::thread([this] { status_ok_ = collector_->run(stop_.get()).ok(); });
  }
  ~ShimSession() { stop(); }

  // The environment for a shimmed program.
  std::vector<std::string> env(const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> e = base_env(extra);
    e.push_back("LD_PRELOAD=" + shim_library());
    e.push_back("CORDON_SHIM_SOCK=" + socket_path_);
    e.push_back("CORDON_SESSION=test-session");
    return e;
  }

  // Stops the collector (after draining) and returns every record written.
  std::vector<nlohmann::json> events() {
    stop();
    std::vector<nlohmann::json> out;
    std::ifstream in(events_path_);
    std::string line;
    while (std::getline(in, line)) {
      out.push_back(nlohmann::json::parse(line));
    }
    return out;
  }

  const TempDir& dir() const { return dir_; }
  const std::string& socket_path() const { return socket_path_; }
  const preload_shim::Collector& collector() const { return *collector_; }
  preload_shim::Collector& collector() { return *collector_; }

 private:
  void stop() {
    if (thread_.joinable()) {
      uint64_t one = 1;
      EXPECT_EQ(::write(stop_.get(), &one, sizeof one), static_cast<ssize_t>(sizeof one));
      thread_.join();
      EXPECT_TRUE(status_ok_);
    }
  }

  TempDir dir_;
  std::string events_path_;
  std::string socket_path_;
  std::unique_ptr<preload_shim::Collector> collector_;
  UniqueFd stop_;
  std::thread thread_;
  bool status_ok_ = false;
};

inline std::vector<nlohmann::json> of_kind(const std::vector<nlohmann::json>& evs,
                                           const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& e : evs) {
    if (e.value("kind", "") == kind) {
      out.push_back(e);
    }
  }
  return out;
}

inline std::string slurp_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace cordon::testing
