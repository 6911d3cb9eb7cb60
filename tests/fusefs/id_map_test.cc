// The copy-on-write view belongs to the agent (--agent-ids): the workspace owner's files are shown
// as the sandbox user's, who may then change them as an owner could; other owners' files keep
// their ids and modes; what the agent makes is stored under the owner's ids (a root daemon) or
// the daemon's own (a rootless one), never with a setuid/setgid bit the agent asked for.
#include "fusefs/id_map.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/fusefs/mount_fixture.h"
#include "tests/support/fuse_user.h"

namespace cordon::fusefs::testing {
namespace {

constexpr const char* kOpenPolicy = R"({"filesystem": {"deny": [], "protect": []}})";
// With xattrs kept (filesystem.xattrs): what an agent may set then.
constexpr const char* kXattrPolicy =
    R"({"filesystem": {"deny": [], "protect": [], "xattrs": true}})";
constexpr uid_t kNobody = 65534;
constexpr uid_t kOther = 4242;

// Runs each step as the caller and prints "step ok [value]" or "step ERRNO-NAME", one a line.
constexpr const char* kSteps = R"PY(
import errno, os, stat, sys
os.chdir(sys.argv[1])
os.umask(0o022)
def owner(p):
    st = os.lstat(p)
    return '%d:%d %s' % (st.st_uid, st.st_gid, stat.filemode(st.st_mode))
def write(p, data, mode='a'):
    with open(p, mode) as f:
        f.write(data)
def create(p, mode):
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, mode))
def copy_into(src, dst):
    i, o = os.open(src, os.O_RDONLY), os.open(dst, os.O_WRONLY)
    try:
        return os.copy_file_range(i, o, 1 << 20, 0, 0)
    finally:
        os.close(i); os.close(o)
def mmap_write(p, data):
    import mmap
    fd = os.open(p, os.O_RDWR)
    try:
        m = mmap.mmap(fd, len(data)); m[:] = data; m.flush(); m.close()
    finally:
        os.close(fd)
def punch(p, n):
    import ctypes
    fd = os.open(p, os.O_RDWR)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.fallocate(fd, 3, ctypes.c_long(0), ctypes.c_long(n)) != 0:  # PUNCH_HOLE|KEEP_SIZE
            raise OSError(ctypes.get_errno(), 'fallocate')
    finally:
        os.close(fd)
def acl(uid):  # a POSIX ACL xattr giving `uid` rwx: USER_OBJ, USER, GROUP_OBJ, MASK, OTHER
    import struct
    e = [(1, 6, -1), (2, 7, uid), (4, 4, -1), (0x10, 7, -1), (0x20, 4, -1)]
    return struct.pack('<I', 2) + b''.join(struct.pack('<HHI', t, p, i & 0xffffffff) for t, p, i in e)
for line in sys.stdin.read().splitlines():
    name, _, code = line.partition(': ')
    try:
        r = eval(code)
        print(name, 'ok' if r is None else 'ok %s' % (r,))
    except OSError as e:
        print(name, errno.errorcode[e.errno])
)PY";

std::string run_steps(const std::string& dir, const std::string& steps,
                      std::optional<cordon::testing::UserIds> as) {
  cordon::testing::RunSpec spec{.stdin_data = steps, .deadline = std::chrono::seconds(60)};
  if (as) {
    spec.uid = as->uid;
    spec.gid = as->gid;
  }
  auto r = cordon::testing::run_program({"/usr/bin/python3", "-c", kSteps, dir}, spec);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  return r.out;
}

// Every object of the upper layer (internal records included) has these ids and no set-id bit
// on a non-directory.
void expect_upper_owned_by(const std::string& upper, uid_t uid, gid_t gid) {
  std::error_code ec;
  size_t n = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(upper, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    ASSERT_EQ(::lstat(it->path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, uid) << it->path();
    EXPECT_EQ(st.st_gid, gid) << it->path();
    if (!S_ISDIR(st.st_mode)) {
      EXPECT_EQ(st.st_mode & (S_ISUID | S_ISGID), 0u) << it->path();
    }
    ++n;
  }
  EXPECT_GT(n, 3u) << "the steps left nothing in the upper layer";
}

TEST(IdMap, ParsesUidGidAndRefusesAnythingElse) {
  auto ok = parse_ids("1000:1001", "--agent-ids");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->uid, 1000u);
  EXPECT_EQ(ok->gid, 1001u);
  for (const char* bad : {"", "1000", "1000:", ":1000", "a:b", "-1:0", "0:4294967295",
                          "1000:1000:1", " 1:2", "1:2 ", "+1:2", "99999999999:1"}) {
    auto r = parse_ids(bad, "--agent-ids");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().to_string().find("--agent-ids \"" + std::string(bad) + "\" is not UID:GID"),
              std::string::npos)
        << r.error().to_string();
  }
}

TEST(IdMap, PresentsStoresAndStripsSetIdBits) {
  IdMap m({65534, 65533}, {0, 0}, {0, 0});
  struct stat st {};
  st.st_uid = 0;
  st.st_gid = 1234;
  m.present(&st);
  EXPECT_EQ(st.st_uid, 65534u);  // the owner's: the agent's
  EXPECT_EQ(st.st_gid, 1234u);   // another group keeps its id
  st.st_uid = 4242;              // another owner's object in the owner's group: both ids stay
  st.st_gid = 0;
  m.present(&st);
  EXPECT_EQ(st.st_uid, 4242u);
  EXPECT_EQ(st.st_gid, 0u);
  EXPECT_EQ(m.store_uid(65534), 0u);
  EXPECT_EQ(m.store_gid(65533), 0u);
  EXPECT_EQ(m.store_uid(4242), 4242u);
  EXPECT_EQ(m.settable(06755, S_IFREG, 65534), 0755u);
  EXPECT_EQ(m.settable(06755, S_IFDIR, 65534), 02755u);
  EXPECT_EQ(m.settable(06755, S_IFREG, 0), 06755u);  // uid 0 in the view, as natively
  IdMap identity;
  EXPECT_EQ(identity.settable(06755, S_IFREG, 65534), 06755u);
  st.st_uid = 0;
  identity.present(&st);
  EXPECT_EQ(st.st_uid, 0u);
}

TEST(CowFsIdMap, BadIdsOrAModeOtherThanCowAreRefusedAtStart) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs bad(kOpenPolicy);
  std::string why = bad.start({"--agent-ids", "65534"});
  EXPECT_NE(why.find("--agent-ids \"65534\" is not UID:GID"), std::string::npos) << why;
  MountedFs owner_alone(kOpenPolicy);
  why = owner_alone.start({"--owner-ids", "0:0"});
  EXPECT_NE(why.find("--owner-ids requires --agent-ids"), std::string::npos) << why;
  MountedFs ro(R"({"filesystem": {"mode": "ro"}})");
  why = ro.start({"--agent-ids", "65534:65534"});
  EXPECT_NE(why.find("only the cow mode is"), std::string::npos) << why;
}

// A root daemon over a root-owned workspace, the agent as nobody (cordon as root with no other
// user to pick): every step an owner may take succeeds; other owners' files stay theirs.
TEST(CowFsIdMap, RootOwnedWorkspaceIsTheAgentsToChange) {
  CORDON_REQUIRE_ROOT();
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  write_file(m.lower("a.txt"), "a\n");
  write_file(m.lower("ro.txt"), "r\n");
  write_file(m.lower("secret"), "s\n");
  write_file(m.lower("other.txt"), "o\n");
  write_file(m.lower("other-grp.txt"), "g\n");
  ASSERT_EQ(::mkdir(m.lower("sub").c_str(), 0755), 0);
  write_file(m.lower("sub/f"), "f\n");
  ASSERT_EQ(::mkdir(m.lower("rodir").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(m.lower("otherdir").c_str(), 0755), 0);
  ASSERT_EQ(::chmod(m.lower("ro.txt").c_str(), 0444), 0);
  ASSERT_EQ(::chmod(m.lower("secret").c_str(), 0600), 0);
  ASSERT_EQ(::chmod(m.lower("rodir").c_str(), 0555), 0);
  ASSERT_EQ(::chmod(m.lower("other.txt").c_str(), 0600), 0);
  ASSERT_EQ(::chown(m.lower("other.txt").c_str(), kOther, kOther), 0);
  ASSERT_EQ(::chmod(m.lower("other-grp.txt").c_str(), 0664), 0);
  ASSERT_EQ(::chown(m.lower("other-grp.txt").c_str(), kOther, 0), 0);  // the owner's group
  ASSERT_EQ(::chown(m.lower("otherdir").c_str(), kOther, kOther), 0);
  ::chmod(m.base("").c_str(), 0755);
  const std::string lower_before = tree_manifest(m.lower(), true, true);
  ASSERT_EQ(m.start({"--allow-other", "--agent-ids", "65534:65534"}), "");

  const std::string steps =
      "stat a.txt: owner('a.txt')\n"
      "stat other.txt: owner('other.txt')\n"
      "read secret: open('secret').read().strip()\n"
      "append a.txt: write('a.txt', 'more\\n')\n"
      "write ro.txt: write('ro.txt', 'x')\n"
      "chmod ro.txt: os.chmod('ro.txt', 0o644)\n"
      "write ro.txt again: write('ro.txt', 'x\\n')\n"
      "create new.txt: write('new.txt', 'new\\n', 'w')\n"
      "stat new.txt: owner('new.txt')\n"
      "unlink sub/f: os.unlink('sub/f')\n"
      "rmdir sub: os.rmdir('sub')\n"
      "utime a.txt: os.utime('a.txt', (1000000000, 1000000000))\n"
      "mtime a.txt: int(os.stat('a.txt').st_mtime)\n"
      "mkdir newdir: os.mkdir('newdir')\n"
      "rmdir newdir: os.rmdir('newdir')\n"
      "create in rodir: write('rodir/y', 'y', 'w')\n"
      "chmod rodir: os.chmod('rodir', 0o755)\n"
      "create in rodir again: write('rodir/y', 'y', 'w')\n"
      "rename a.txt: os.rename('a.txt', 'rodir/a2.txt')\n"
      "read a2: open('rodir/a2.txt').read().replace(chr(10), '|')\n"
      "chown to self: os.chown('new.txt', 65534, 65534)\n"
      "chown to root: os.chown('new.txt', 0, 0)\n"
      "read other.txt: open('other.txt').read()\n"
      "chmod other.txt: os.chmod('other.txt', 0o644)\n"
      "create in otherdir: write('otherdir/z', 'z', 'w')\n"
      "stat other-grp.txt: owner('other-grp.txt')\n"
      "write other-grp.txt: write('other-grp.txt', 'x')\n"
      "set a file capability: os.setxattr('new.txt', 'security.capability', "
      "bytes([1, 0, 0, 2]) + bytes(16))\n"
      "set a trusted xattr: os.setxattr('new.txt', 'trusted.x', b'1')\n"
      "chmod 4755: os.chmod('new.txt', 0o4755)\n"
      "mode new.txt: oct(os.stat('new.txt').st_mode)\n"
      "create 6755: create('suid', 0o6755)\n"
      "mode suid: oct(os.stat('suid').st_mode)\n"
      "mkdir gdir: os.mkdir('gdir')\n"
      "chmod gdir 2775: os.chmod('gdir', 0o2775)\n"
      "mode gdir: oct(os.stat('gdir').st_mode)\n";
  EXPECT_EQ(run_steps(m.mnt(), steps, cordon::testing::UserIds{kNobody, kNobody}),
            "stat a.txt ok 65534:65534 -rw-r--r--\n"
            "stat other.txt ok 4242:4242 -rw-------\n"
            "read secret ok s\n"
            "append a.txt ok\n"
            "write ro.txt EACCES\n"  // an owner without the write bit, as natively
            "chmod ro.txt ok\n"
            "write ro.txt again ok\n"
            "create new.txt ok\n"
            "stat new.txt ok 65534:65534 -rw-r--r--\n"
            "unlink sub/f ok\n"
            "rmdir sub ok\n"
            "utime a.txt ok\n"
            "mtime a.txt ok 1000000000\n"
            "mkdir newdir ok\n"
            "rmdir newdir ok\n"
            "create in rodir EACCES\n"
            "chmod rodir ok\n"
            "create in rodir again ok\n"
            "rename a.txt ok\n"
            "read a2 ok a|more|\n"
            "chown to self ok\n"
            "chown to root EPERM\n"
            "read other.txt EACCES\n"
            "chmod other.txt EPERM\n"
            "create in otherdir EACCES\n"
            "stat other-grp.txt ok 4242:0 -rw-rw-r--\n"
            "write other-grp.txt EACCES\n"
            "set a file capability EPERM\n"
            "set a trusted xattr EPERM\n"
            "chmod 4755 ok\n"
            "mode new.txt ok 0o100755\n"
            "create 6755 ok\n"
            "mode suid ok 0o100755\n"
            "mkdir gdir ok\n"
            "chmod gdir 2775 ok\n"
            "mode gdir ok 0o42775\n");

  EXPECT_EQ(tree_manifest(m.lower(), true, true), lower_before) << "the real workspace changed";
  // On disk the agent's objects are the owner's (root's), like the copies of root's files.
  expect_upper_owned_by(m.upper(), 0, 0);
  // uid 0 in the view keeps the bits it sets, as natively.
  ASSERT_EQ(::chmod(m.mnt("suid").c_str(), 04755), 0);
  struct stat st {};
  ASSERT_EQ(::stat(m.mnt("suid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 04755u);
  ASSERT_EQ(::chmod(m.mnt("suid").c_str(), 0755), 0);
  // The presentation is the layers', not the kernel cache's: the same after a remount.
  m.stop();
  ASSERT_EQ(m.start({"--allow-other", "--agent-ids", "65534:65534"}), "");
  for (const char* p : {"new.txt", "rodir/a2.txt", "rodir", "gdir", ""}) {
    ASSERT_EQ(::lstat(m.mnt(p).c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_uid, kNobody) << p;
    EXPECT_EQ(st.st_gid, kNobody) << p;
  }
  ASSERT_EQ(::lstat(m.mnt("other.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kOther);
}

// Without --agent-ids the view shows the host's owners: the same steps are refused to nobody.
TEST(CowFsIdMap, WithoutAgentIdsTheHostsOwnersApply) {
  CORDON_REQUIRE_ROOT();
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  write_file(m.lower("a.txt"), "a\n");
  ::chmod(m.base("").c_str(), 0755);
  ASSERT_EQ(m.start({"--allow-other"}), "");
  EXPECT_EQ(run_steps(m.mnt(),
                      "stat a.txt: owner('a.txt')\n"
                      "append a.txt: write('a.txt', 'more')\n"
                      "create new.txt: write('new.txt', 'new', 'w')\n",
                      cordon::testing::UserIds{kNobody, kNobody}),
            "stat a.txt ok 0:0 -rw-r--r--\n"
            "append a.txt EACCES\n"
            "create new.txt EACCES\n");
}

// A rootless daemon (an unprivileged user) over a workspace root owns and others may only read:
// the agent (that same user) still gets its own writable copy, stored as the daemon's.
TEST(CowFsIdMap, RootlessDaemonGivesTheAgentItsCopyOfARootOwnedWorkspace) {
  std::optional<cordon::testing::UserIds> user;
  MountedFs m(kOpenPolicy);
  if (::geteuid() == 0) {
    user = cordon::testing::fuse_user();
    CORDON_REQUIRE(user.has_value(), cordon::testing::kFuseUserWhy);
    for (const char* name : {"GPL-3", "BSD", "Apache-2.0", "Artistic"}) {
      write_file(m.lower(name), read_file(std::string("/usr/share/common-licenses/") + name));
    }
    m.run_daemon_as(user->uid, user->gid);
  } else {
    CORDON_REQUIRE(fuse_available(), kFuseWhy);
    // A directory of the system: root's, readable by all (Debian's base-files).
    m.use_lower("/usr/share/common-licenses");
  }
  uid_t uid = user ? user->uid : ::geteuid();
  gid_t gid = user ? user->gid : ::getegid();
  struct stat lst {};
  ASSERT_EQ(::stat(m.lower().c_str(), &lst), 0);
  ASSERT_EQ(lst.st_uid, 0u) << "the workspace must be another user's";
  const std::string lower_before = tree_manifest(m.lower(), true, true);
  const std::string ids = std::to_string(uid) + ":" + std::to_string(gid);
  ASSERT_EQ(m.start({"--agent-ids", ids}), "");
  EXPECT_EQ(run_steps(m.mnt(),
                      "stat GPL-3: owner('GPL-3')\n"
                      "append GPL-3: write('GPL-3', 'appended\\n')\n"
                      "tail GPL-3: open('GPL-3').read().splitlines()[-1]\n"
                      "unlink BSD: os.unlink('BSD')\n"
                      "chmod Artistic: os.chmod('Artistic', 0o600)\n"
                      "utime Artistic: os.utime('Artistic', (1000000000, 1000000000))\n"
                      "stat Artistic: owner('Artistic')\n"
                      "rename Apache-2.0: os.rename('Apache-2.0', 'Apache.moved')\n"
                      "create new.txt: write('new.txt', 'new', 'w')\n"
                      "mkdir d: os.mkdir('d')\n"
                      "rmdir d: os.rmdir('d')\n"
                      "chmod 4755: os.chmod('new.txt', 0o4755)\n"
                      "mode new.txt: oct(os.stat('new.txt').st_mode)\n",
                      user),
            "stat GPL-3 ok " + ids +
                " -rw-r--r--\n"
                "append GPL-3 ok\n"
                "tail GPL-3 ok appended\n"
                "unlink BSD ok\n"
                "chmod Artistic ok\n"
                "utime Artistic ok\n"
                "stat Artistic ok " +
                ids +
                " -rw-------\n"
                "rename Apache-2.0 ok\n"
                "create new.txt ok\n"
                "mkdir d ok\n"
                "rmdir d ok\n"
                "chmod 4755 ok\n"
                "mode new.txt ok 0o100755\n");
  EXPECT_EQ(tree_manifest(m.lower(), true, true), lower_before) << "the real workspace changed";
  expect_upper_owned_by(m.upper(), uid, gid);
}

// The owner's set-id files (root's: a root-owned workspace) appear as the agent's, who may write
// them as an owner could; every way of changing their bytes drops the bits, as write(2) does
// natively, so no set-id file in the upper layer holds the agent's bytes. No POSIX ACL reaches
// the upper layer either (the view does not enforce ACLs; commit would carry them to the host).
TEST(CowFsIdMap, AgentsBytesNeverStayInASetIdFileAndItsAclsAreRefused) {
  CORDON_REQUIRE_ROOT();
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kXattrPolicy);
  const std::string script = "#!/bin/sh\necho root\n";
  for (const char* name : {"su-write", "su-copy", "su-mmap", "su-punch", "sg-mmap"}) {
    write_file(m.lower(name), script);
    ASSERT_EQ(::chmod(m.lower(name).c_str(), name[1] == 'g' ? 02755 : 04755), 0);
  }
  write_file(m.lower("payload"), "agent bytes\n");
  ASSERT_EQ(::mkdir(m.lower("d").c_str(), 0755), 0);
  ::chmod(m.base("").c_str(), 0755);
  ASSERT_EQ(m.start({"--allow-other", "--agent-ids", "65534:65534"}), "");

  EXPECT_EQ(
      run_steps(m.mnt(),
                "stat su-copy: owner('su-copy')\n"
                "write: write('su-write', 'x')\n"
                "copy_file_range: copy_into('payload', 'su-copy')\n"
                "mmap: mmap_write('su-mmap', b'#!/bin/x')\n"
                "mmap sgid: mmap_write('sg-mmap', b'#!/bin/x')\n"
                "punch a hole: punch('su-punch', 4)\n"
                "acl on a file: os.setxattr('payload', 'system.posix_acl_access', acl(4242))\n"
                "default acl on a dir: os.setxattr('d', 'system.posix_acl_default', acl(4242))\n"
                "user xattr: os.setxattr('payload', 'user.note', b'1')\n"
                "read it: os.getxattr('payload', 'user.note')\n",
                cordon::testing::UserIds{kNobody, kNobody}),
      "stat su-copy ok 65534:65534 -rwsr-xr-x\n"
      "write ok\n"
      "copy_file_range ok 12\n"
      "mmap ok\n"
      "mmap sgid ok\n"
      "punch a hole ok\n"
      "acl on a file ENOTSUP\n"  // EOPNOTSUPP, which Python names ENOTSUP
      "default acl on a dir ENOTSUP\n"
      "user xattr ok\n"
      "read it ok b'1'\n");
  m.stop();  // every page written back

  // The agent's bytes are in the upper layer, in files without a set-id bit.
  EXPECT_EQ(read_file(m.upper("su-copy")).substr(0, 12), "agent bytes\n");
  EXPECT_EQ(read_file(m.upper("su-mmap")).substr(0, 8), "#!/bin/x");
  EXPECT_EQ(read_file(m.upper("sg-mmap")).substr(0, 8), "#!/bin/x");
  EXPECT_EQ(read_file(m.upper("su-punch")).substr(0, 4), std::string(4, '\0'));
  expect_upper_owned_by(m.upper(), 0, 0);
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(m.upper(), ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    for (const char* acl : {"system.posix_acl_access", "system.posix_acl_default"}) {
      EXPECT_LT(::lgetxattr(it->path().c_str(), acl, nullptr, 0), 0) << it->path() << " " << acl;
    }
  }
}

}  // namespace
}  // namespace cordon::fusefs::testing
