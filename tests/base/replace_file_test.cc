// replace_file: the new content appears whole under the name, with the mode and no temporary
// file left; a failure leaves the old file as it was; a symlink planted at the temporary name is
// not written through.
#include "base/replace_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/support/test_env.h"

namespace cordon {
namespace {

using testing::TempDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

size_t entries(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n;
  }
  return n;
}

TEST(ReplaceFile, TheNewContentTakesTheNameWithItsModeAndNothingIsLeft) {
  TempDir dir;
  const std::string p = dir / "policy.json";
  write_text(p, "old\n");
  ino_t before = 0;
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  before = st.st_ino;
  ASSERT_TRUE(replace_file(p, "new content\n", {.mode = 0640}).ok());
  EXPECT_EQ(read_text(p), "new content\n");
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_NE(st.st_ino, before);  // a rename, not a rewrite in place
  EXPECT_EQ(entries(dir.path()), 1u);
  // A file that did not exist is made the same way.
  ASSERT_TRUE(replace_file(dir / "fresh", "x").ok());
  EXPECT_EQ(read_text(dir / "fresh"), "x");
}

TEST(ReplaceFile, APlantedSymlinkAtTheTemporaryNameIsNotWrittenThrough) {
  TempDir dir, elsewhere;
  const std::string p = dir / "p.json";
  const std::string target = elsewhere / "victim";
  write_text(p, "old\n");
  write_text(target, "victim\n");
  const std::string tmp = p + "." + std::to_string(::getpid()) + ".tmp";
  ASSERT_EQ(::symlink(target.c_str(), tmp.c_str()), 0);
  ASSERT_TRUE(replace_file(p, "new\n").ok());
  EXPECT_EQ(read_text(p), "new\n");
  EXPECT_EQ(read_text(target), "victim\n");
  EXPECT_EQ(entries(dir.path()), 1u);
}

TEST(ReplaceFile, AFailureLeavesTheOldFileAndNamesTheCall) {
  TempDir dir;
  const std::string p = dir / "p.json";
  write_text(p, "old\n");
  ::mkdir((dir / "d").c_str(), 0755);
  // Renaming a file over a directory fails: the old content stays, no temporary file is left.
  auto s = replace_file(dir / "d", "new\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().to_string().find("rename(\"" + dir / "d."), std::string::npos)
      << s.error().to_string();
  EXPECT_EQ(entries(dir.path()), 2u);
  s = replace_file(dir / "missing-dir/p.json", "new\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().to_string().find("missing-dir/p.json."), std::string::npos);
  EXPECT_EQ(read_text(p), "old\n");
}

}  // namespace
}  // namespace cordon
