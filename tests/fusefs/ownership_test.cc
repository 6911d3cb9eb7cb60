// Owner, group and set-id bits of files created through the view match a native directory's: the
// caller's ids, a setgid directory's group, S_ISUID kept as asked (a root daemon creates as root,
// then gives the file away only when that changes something).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

constexpr const char* kOpenPolicy = R"({"filesystem": {"deny": [], "protect": []}})";
constexpr uid_t kNobody = 65534;

// The same steps in `root` (the view or a native directory): directories with and without the
// setgid bit, files created in them by root and by nobody. Returns "name uid gid mode" lines.
const std::vector<const char*> kNames = {
    "plain/root",   "sgid/root",         "plain/root-suid", "plain/nobody",  "sgid/nobody",
    "sgid0/nobody", "plain/nobody-suid", "sgid/rootdir",    "sgid/rootlink", "plain/dir",
    "plain/link",   "plain/fifo",        "sgid/dir",        "sgid/link",     "sgid/fifo",
    "sgid0/dir",    "sgid0/link",        "sgid0/fifo"};

// "name uid gid mode" of every name above.
std::string describe(const std::string& root) {
  std::ostringstream out;
  for (const char* name : kNames) {
    struct stat st {};
    EXPECT_EQ(::lstat((root + "/" + name).c_str(), &st), 0) << name;
    out << name << " " << st.st_uid << " " << st.st_gid << " " << std::oct << st.st_mode << std::dec
        << "\n";
  }
  return out.str();
}

std::string create_and_describe(const std::string& root) {
  mode_t old = ::umask(0);
  ::mkdir((root + "/plain").c_str(), 0777);
  ::mkdir((root + "/sgid").c_str(), 0777);
  ::mkdir((root + "/sgid0").c_str(), 0777);
  EXPECT_EQ(::chown((root + "/sgid").c_str(), 0, 1234), 0);
  EXPECT_EQ(::chmod((root + "/sgid").c_str(), 02777), 0);
  EXPECT_EQ(::chmod((root + "/sgid0").c_str(), 02777), 0);  // setgid, group 0 (the daemon's)
  for (auto [name, mode] : std::vector<std::pair<std::string, mode_t>>{
           {"plain/root", 0644}, {"sgid/root", 0644}, {"plain/root-suid", 04755}}) {
    int fd = ::open((root + "/" + name).c_str(), O_CREAT | O_EXCL | O_WRONLY, mode);
    EXPECT_GE(fd, 0) << name;
    ::close(fd);
  }
  EXPECT_EQ(::mkdir((root + "/sgid/rootdir").c_str(), 0755), 0);
  EXPECT_EQ(::symlink("target", (root + "/sgid/rootlink").c_str()), 0);
  ::umask(old);
  auto r = cordon::testing::run_program(
      {"/usr/bin/python3", "-c",
       "import os, sys\n"
       "os.umask(0)\n"
       "for name, mode in (('plain/nobody', 0o644), ('sgid/nobody', 0o644),\n"
       "                   ('sgid0/nobody', 0o644), ('plain/nobody-suid', 0o4755)):\n"
       "    os.close(os.open(os.path.join(sys.argv[1], name), os.O_CREAT | os.O_EXCL | "
       "os.O_WRONLY, mode))\n"
       "for d in ('plain', 'sgid', 'sgid0'):\n"
       "    os.mkdir(os.path.join(sys.argv[1], d, 'dir'), 0o755)\n"
       "    os.symlink('target', os.path.join(sys.argv[1], d, 'link'))\n"
       "    os.mkfifo(os.path.join(sys.argv[1], d, 'fifo'), 0o644)\n"
       "print('done')\n",
       root},
      {.deadline = std::chrono::seconds(60), .uid = kNobody, .gid = kNobody});
  EXPECT_EQ(r.out, "done\n") << r.err;
  return describe(root);
}

TEST(CowFsOwnership, CreatedFilesGetTheIdsAndModeOfANativeCreate) {
  CORDON_REQUIRE_ROOT();
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ::chmod(m.base("").c_str(), 0755);  // nobody walks to the native directory and the view
  std::string native = m.base("native");
  ASSERT_EQ(::mkdir(native.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(native.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(m.lower().c_str(), 0777), 0);
  ASSERT_EQ(m.start({"--allow-other"}), "");
  std::string expected = create_and_describe(native);
  EXPECT_EQ(create_and_describe(m.mnt()), expected);
  // What the test relies on natively: root's files are root's, nobody's are nobody's, the
  // setgid directories give their groups, S_ISUID stays.
  EXPECT_NE(expected.find("sgid/root 0 1234 "), std::string::npos) << expected;
  EXPECT_NE(expected.find("sgid/nobody 65534 1234 "), std::string::npos) << expected;
  EXPECT_NE(expected.find("sgid0/nobody 65534 0 "), std::string::npos) << expected;
  EXPECT_NE(expected.find("plain/nobody 65534 65534 100644"), std::string::npos) << expected;
  EXPECT_NE(expected.find("plain/nobody-suid 65534 65534 104755"), std::string::npos) << expected;
  EXPECT_NE(expected.find("plain/root-suid 0 0 104755"), std::string::npos) << expected;
  EXPECT_NE(expected.find("sgid/dir 65534 1234 42755"), std::string::npos) << expected;
  // After a remount (attributes from the upper layer, not the kernel's cache).
  m.stop();
  ASSERT_EQ(m.start({"--allow-other"}), "");
  EXPECT_EQ(describe(m.mnt()), expected);
}

}  // namespace
}  // namespace cordon::fusefs::testing
