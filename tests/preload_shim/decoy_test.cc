// The canaries' decoys through the shim: every program reports opens of files named like a decoy
// by device and inode, and only the collector, told which those are, turns one into an fs.canary
// record naming the canary and the process. Nothing in the program's environment says which.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "tests/preload_shim/shim_fixture.h"

namespace cordon::testing {
namespace {

void put(const std::string& path) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << "x\n";
}

struct stat stat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st;
}

TEST(ShimDecoys, OnlyTheDecoyTheCollectorKnowsIsAnFsCanaryRecord) {
  ShimSession session;
  const std::string decoy = session.dir() / "home/.aws/credentials";
  const std::string twin = session.dir() / "elsewhere/credentials";  // same name, other file
  const std::string dotenv = session.dir() / "home/.env";            // a decoy name, not a decoy
  for (const auto& p : {decoy, twin, dotenv}) {
    put(p);
  }
  const struct stat st = stat_of(decoy);
  session.collector().set_decoys(
      {{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), "aws"}});
  RunSpec spec;
  spec.env = session.env();
  RunResult r = run_program({"/bin/cat", twin, dotenv, decoy}, spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "x\nx\nx\n");
  auto canaries = of_kind(session.events(), "fs.canary");
  ASSERT_EQ(canaries.size(), 1u);
  const auto& e = canaries[0];
  EXPECT_EQ(e.value("canary", ""), "aws");
  EXPECT_EQ(e.value("path", ""), decoy);
  EXPECT_EQ(e.value("exe", ""), "/usr/bin/cat");
  EXPECT_EQ(e["argv"], nlohmann::json::array({"/bin/cat", twin, dotenv, decoy}));
  EXPECT_FALSE(e.contains("dev"));
  EXPECT_FALSE(e.contains("ino"));
}

TEST(ShimDecoys, WithoutDecoysNoOpenIsAnFsCanaryRecord) {
  ShimSession session;
  const std::string file = session.dir() / "credentials";
  put(file);
  RunSpec spec;
  spec.env = session.env();
  RunResult r = run_program({"/usr/bin/python3", "-c", "open('" + file + "').read()"}, spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_TRUE(of_kind(session.events(), "fs.canary").empty());
}

}  // namespace
}  // namespace cordon::testing
