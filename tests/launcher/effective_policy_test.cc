// `cordon run`'s flags that set policy values: refused for the policy file's reason, in the same
// words with the flag's name, and a good value lands in the session's policy.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/launcher/sandbox_fixture.h"

namespace {

using cordon::testing::cordon_bin;
using cordon::testing::read_text;
using cordon::testing::run_program;
using cordon::testing::SandboxFixture;
using cordon::testing::TempDir;
using cordon::testing::write_text;
using nlohmann::json;

// The lists flags append to start empty, so a flag's entry and the file's have the same index.
constexpr const char* kEmptyLists =
    R"({"filesystem": {"read": [], "write": []}, "network": {"allow": []},
        "process": {"env": {"keep": [], "pass": [], "set": {}}}})";

struct Refused {
  const char* flag;
  const char* value;      // as typed on the command line
  const char* file_json;  // the same value in a policy file (on top of kEmptyLists)
};

// One bad value at least for every flag that sets a policy field.
const Refused kRefused[] = {
    {"--workspace", "~bob/x", R"({"filesystem": {"workspace": "~bob/x"}})"},
    {"--mode", "copy", R"({"filesystem": {"mode": "copy"}})"},
    {"--memory", "12Q", R"({"process": {"memory": "12Q"}})"},
    {"--memory", "512K", R"({"process": {"memory": "512K"}})"},
    {"--cpus", "5000", R"({"process": {"cpus": 5000}})"},
    {"--cpus", "0.001", R"({"process": {"cpus": 0.001}})"},
    {"--cpus", "-1", R"({"process": {"cpus": -1}})"},
    {"--cpus", "half", R"({"process": {"cpus": "half"}})"},
    {"--pids", "4194305", R"({"process": {"pids": 4194305}})"},
    {"--pids", "1.5", R"({"process": {"pids": 1.5}})"},
    {"--nofile", "1", R"({"process": {"nofile": 1}})"},
    {"--nofile", "2000000", R"({"process": {"nofile": 2000000}})"},
    {"--timeout", "soon", R"({"process": {"timeout": "soon"}})"},
    {"--env-keep", "A-B", R"({"process": {"env": {"keep": ["A-B"]}}})"},
    {"--env-pass", "AWS_*", R"({"process": {"env": {"pass": ["AWS_*"]}}})"},
    {"--env-set", "A-B=1", R"({"process": {"env": {"set": {"A-B": "1"}}}})"},
    {"--read", "rel/path", R"({"filesystem": {"read": ["rel/path"]}})"},
    {"--write", "/tmp/*", R"({"filesystem": {"write": ["/tmp/*"]}})"},
    {"--allow-host", "127.0.0.1", R"({"network": {"allow": ["127.0.0.1"]}})"},
    {"--inspect", "exa mple.com", R"({"network": {"inspect": ["exa mple.com"]}})"},
    {"--credential", "MY_T=nothere.test",
     R"({"network": {"credentials": [{"env": "MY_T", "hosts": ["nothere.test"]}]}})"},
};

// One good value for every flag that sets a policy field, with the same value in a file.
const Refused kAccepted[] = {
    {"--mode", "ro", R"({"filesystem": {"mode": "ro"}})"},
    {"--memory", "256M", R"({"process": {"memory": "256M"}})"},
    {"--cpus", "0.01", R"({"process": {"cpus": 0.01}})"},
    {"--pids", "4194304", R"({"process": {"pids": 4194304}})"},
    {"--nofile", "16", R"({"process": {"nofile": 16}})"},
    {"--timeout", "1m30s", R"({"process": {"timeout": "1m30s"}})"},
    {"--env-keep", "CORDON_T_KEEP", R"({"process": {"env": {"keep": ["CORDON_T_KEEP"]}}})"},
    {"--env-pass", "CORDON_T_PASS", R"({"process": {"env": {"pass": ["CORDON_T_PASS"]}}})"},
    {"--env-set", "CORDON_T_SET=a=b", R"({"process": {"env": {"set": {"CORDON_T_SET": "a=b"}}}})"},
    {"--read", "~/.gitconfig", R"({"filesystem": {"read": ["~/.gitconfig"]}})"},
    {"--write", "/nonexistent/cordon-t", R"({"filesystem": {"write": ["/nonexistent/cordon-t"]}})"},
    {"--allow-host", "*.example.com:443", R"({"network": {"allow": ["*.example.com:443"]}})"},
};

// The file's value laid over kEmptyLists, key by key.
std::string with_empty_lists(const char* file_json) {
  json doc = json::parse(kEmptyLists);
  doc.merge_patch(json::parse(file_json));
  return doc.dump();
}

TEST(EffectivePolicy, EveryFlagRefusesWhatThePolicyFileRefusesForTheSameReason) {
  TempDir dir;
  const std::string base = dir / "base.json";
  write_text(base, kEmptyLists);
  for (const Refused& c : kRefused) {
    SCOPED_TRACE(std::string(c.flag) + " " + c.value);
    const std::string file = dir / "policy.json";
    write_text(file, with_empty_lists(c.file_json));
    auto checked = run_program({cordon_bin(), "policy", "check", file});
    ASSERT_EQ(checked.exit_code(), 1) << checked.err;
    const std::string file_prefix = "cordon: " + file + ": ";
    ASSERT_EQ(checked.err.rfind(file_prefix, 0), 0u) << checked.err;
    const std::string reason = checked.err.substr(file_prefix.size());

    const std::string marker = dir / "ran";
    std::vector<std::string> argv = {cordon_bin(), "run", "-q", "-p", base};
    for (auto [flag, value] :
         {std::pair<std::string, std::string>{"--workspace", dir.path()}, {"--mode", "ro"}}) {
      if (flag != c.flag) {  // each flag may be given once
        argv.insert(argv.end(), {flag, value});
      }
    }
    argv.insert(argv.end(), {c.flag, c.value, "--", "touch", marker});
    auto r = run_program(argv);
    EXPECT_EQ(r.exit_code(), 125) << r.err;
    EXPECT_EQ(r.err, std::string("cordon: ") + c.flag + ": " + reason);
    EXPECT_FALSE(std::filesystem::exists(marker)) << "the program ran despite a refused flag";
  }
}

// The session directories under `state`/sessions, by path.
std::set<std::string> sessions(const std::string& state) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(state + "/sessions")) {
    if (e.is_directory()) {
      out.insert(e.path().string());
    }
  }
  return out;
}

// The policy.json of the one session `run` adds to `state`.
json policy_of_new_session(const std::string& state, const std::function<void()>& run) {
  std::set<std::string> before =
      std::filesystem::exists(state + "/sessions") ? sessions(state) : std::set<std::string>{};
  run();
  std::vector<std::string> added;
  for (const std::string& s : sessions(state)) {
    if (before.count(s) == 0) {
      added.push_back(s);
    }
  }
  if (added.size() != 1) {
    ADD_FAILURE() << added.size() << " new sessions: " << ::testing::PrintToString(added);
    return json();
  }
  return json::parse(read_text(added[0] + "/policy.json"));
}

TEST(EffectivePolicy, AGoodValueAsFlagOrInTheFileGivesTheSameEffectivePolicy) {
  SandboxFixture f;
  TempDir dir;
  std::string state;
  for (const auto& kv : f.env()) {
    if (kv.rfind("CORDON_STATE_DIR=", 0) == 0) {
      state = kv.substr(17);
    }
  }
  const std::string base = dir / "base.json";
  write_text(base, kEmptyLists);
  json file_doc = json::parse(kEmptyLists);
  std::vector<std::string> flags = {"-q", "-p", base};
  for (const Refused& c : kAccepted) {
    file_doc.merge_patch(json::parse(c.file_json));
    flags.insert(flags.end(), {c.flag, c.value});
  }
  const std::string file = dir / "policy.json";
  write_text(file, file_doc.dump());

  json by_flags = policy_of_new_session(state, [&] {
    auto r = f.run(flags, {"true"});
    ASSERT_EQ(r.exit_code(), 0) << r.err;
  });
  json by_file = policy_of_new_session(state, [&] {
    auto r = f.run({"-q", "-p", file}, {"true"});
    ASSERT_EQ(r.exit_code(), 0) << r.err;
  });
  ASSERT_TRUE(by_flags.is_object());
  EXPECT_EQ(by_flags, by_file) << json::diff(by_file, by_flags).dump(1);
  // Not equal by being both the default: every flag's value is there.
  EXPECT_EQ(by_flags["process"]["pids"], 4194304);
  EXPECT_EQ(by_flags["process"]["nofile"], 16);
  EXPECT_EQ(by_flags["process"]["cpus"], 0.01);
  EXPECT_EQ(by_flags["process"]["env"]["set"]["CORDON_T_SET"], "a=b");
  EXPECT_EQ(by_flags["network"]["allow"], json::array({"*.example.com:443"}));
}

TEST(EffectivePolicy, GoodFlagValuesLandInTheSessionsPolicy) {
  SandboxFixture f;
  TempDir shown;
  const std::string absent = shown / "not-yet";
  auto r = f.run({"-q",
                  "--mode",
                  "ro",
                  "--cpus",
                  "0.5",
                  "--nofile",
                  "64",
                  "--pids",
                  "100",
                  "--memory",
                  "256M",
                  "--timeout",
                  "30s",
                  "--env-keep",
                  "CORDON_T_KEEP",
                  "--env-pass",
                  "CORDON_T_PASS",
                  "--env-set",
                  "CORDON_T_SET=v",
                  "--read",
                  shown.path(),
                  "--write",
                  absent,
                  "--allow-host",
                  "example.com:443"},
                 {"true"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;

  std::string state;
  for (const auto& kv : f.env()) {
    if (kv.rfind("CORDON_STATE_DIR=", 0) == 0) {
      state = kv.substr(17);
    }
  }
  std::vector<std::string> policies;
  for (const auto& e : std::filesystem::directory_iterator(state + "/sessions")) {
    policies.push_back(e.path().string() + "/policy.json");
  }
  ASSERT_EQ(policies.size(), 1u);
  json p = json::parse(read_text(policies[0]));
  const json& pr = p["process"];
  EXPECT_EQ(pr["cpus"], 0.5);
  EXPECT_EQ(pr["nofile"], 64);
  EXPECT_EQ(pr["pids"], 100);
  EXPECT_EQ(pr["memory"], "256M");
  EXPECT_EQ(pr["timeout"], "30s");
  EXPECT_EQ(pr["env"]["keep"].back(), "CORDON_T_KEEP");
  EXPECT_EQ(pr["env"]["pass"], json::array({"CORDON_T_PASS"}));
  EXPECT_EQ(pr["env"]["set"]["CORDON_T_SET"], "v");
  EXPECT_EQ(p["filesystem"]["mode"], "ro");
  EXPECT_EQ(p["filesystem"]["workspace"], std::filesystem::canonical(f.ws()).string());
  EXPECT_EQ(p["filesystem"]["read"], json::array({shown.path()}));
  EXPECT_EQ(p["filesystem"]["write"], json::array({absent}));
  EXPECT_EQ(p["network"]["allow"], json::array({"example.com:443"}));
}

}  // namespace
