// Unix sockets in the view: bind(2) makes the socket's node in the upper layer, connect(2) from
// another process reaches the binder through the view, rename and unlink work, the inode quota
// counts them; a node left after the daemon restarts is a socket nobody listens on. Device nodes
// stay refused.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/fusefs/mount_fixture.h"

namespace cordon::fusefs::testing {
namespace {

constexpr const char* kOpenPolicy = R"({"filesystem": {"deny": [], "protect": []}})";

std::string python(const std::string& script, const std::string& dir) {
  auto r = cordon::testing::run_program({"/usr/bin/python3", "-c", script, dir},
                                        {.deadline = std::chrono::seconds(60)});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  return r.out;
}

uint64_t inodes_used(MountedFs& m) {
  auto j = nlohmann::json::parse(m.control(R"({"op":"status"})"), nullptr, false);
  return j.is_object() ? j.value("inodes", uint64_t{0}) : 0;
}

// A server bound in the view answers a client in another process, at its first name and after a
// rename; an unlinked name is gone. Prints what each side saw.
constexpr const char* kExchange = R"PY(
import errno, os, socket, stat, sys
os.chdir(sys.argv[1])
def exchange(name):
    pid = os.fork()
    if pid == 0:
        c = socket.socket(socket.AF_UNIX)
        c.connect(name)
        c.sendall(b'ping ' + name.encode())
        os._exit(0 if c.recv(64) == b'pong' else 1)
    a, _ = s.accept()
    got = a.recv(64).decode()
    a.sendall(b'pong')
    _, st = os.waitpid(pid, 0)
    print('server got', repr(got), 'client exit', os.waitstatus_to_exitcode(st))
s = socket.socket(socket.AF_UNIX)
s.bind('srv.sock')
s.listen(4)
print('is socket', stat.S_ISSOCK(os.lstat('srv.sock').st_mode))
exchange('srv.sock')
os.mkdir('d')
os.rename('srv.sock', 'd/moved.sock')
exchange('d/moved.sock')
os.unlink('d/moved.sock')
try:
    socket.socket(socket.AF_UNIX).connect('d/moved.sock')
except OSError as e:
    print('after unlink', errno.errorcode[e.errno])
left = socket.socket(socket.AF_UNIX)
left.bind('left.sock')
try:
    os.mknod('dev', stat.S_IFCHR | 0o600, os.makedev(1, 3))
    print('mknod chr ok')
except OSError as e:
    print('mknod chr', errno.errorcode[e.errno])
try:
    os.mknod('blk', stat.S_IFBLK | 0o600, os.makedev(7, 0))
    print('mknod blk ok')
except OSError as e:
    print('mknod blk', errno.errorcode[e.errno])
)PY";

TEST(CowFsSockets, BindConnectRenameAndUnlinkThroughTheView) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  const std::string lower_before = tree_manifest(m.lower(), true);
  ASSERT_EQ(m.start(), "");
  uint64_t before = inodes_used(m);
  EXPECT_EQ(python(kExchange, m.mnt()),
            "is socket True\n"
            "server got 'ping srv.sock' client exit 0\n"
            "server got 'ping d/moved.sock' client exit 0\n"
            "after unlink ENOENT\n"
            "mknod chr EPERM\n"
            "mknod blk EPERM\n");
  // The socket's node is in the upper layer, counted like any inode (d/ and left.sock remain).
  struct stat st {};
  ASSERT_EQ(::lstat(m.upper("left.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(::lstat(m.upper("dev").c_str(), &st), -1);
  EXPECT_EQ(inodes_used(m), before + 2);
  EXPECT_EQ(tree_manifest(m.lower(), true), lower_before);

  // After a restart the node is a socket no one listens on: refused, and removable.
  m.stop();
  ASSERT_EQ(m.start(), "");
  EXPECT_EQ(python("import errno, os, socket, stat, sys\n"
                   "os.chdir(sys.argv[1])\n"
                   "print(stat.S_ISSOCK(os.lstat('left.sock').st_mode))\n"
                   "try:\n"
                   "    socket.socket(socket.AF_UNIX).connect('left.sock')\n"
                   "except OSError as e:\n"
                   "    print(errno.errorcode[e.errno])\n"
                   "os.rename('left.sock', 'd/left.sock')\n"
                   "os.unlink('d/left.sock')\n"
                   "print(sorted(os.listdir('.')), os.listdir('d'))\n",
                   m.mnt()),
            "True\nECONNREFUSED\n['d'] []\n");
}

// The inode quota counts sockets: a bind past it fails with EDQUOT.
TEST(CowFsSockets, QuotaCountsThem) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(R"({"filesystem": {"deny": [], "protect": [], "quota": {"inodes": 2}}})");
  ASSERT_EQ(m.start(), "");
  EXPECT_EQ(python("import errno, os, socket, sys\n"
                   "os.chdir(sys.argv[1])\n"
                   "keep = []\n"
                   "for n in ('a.sock', 'b.sock', 'c.sock'):\n"
                   "    s = socket.socket(socket.AF_UNIX)\n"
                   "    try:\n"
                   "        s.bind(n)\n"
                   "        keep.append(s)\n"
                   "        print(n, 'bound')\n"
                   "    except OSError as e:\n"
                   "        print(n, errno.errorcode[e.errno])\n",
                   m.mnt()),
            "a.sock bound\nb.sock bound\nc.sock EDQUOT\n");
  EXPECT_EQ(inodes_used(m), 2u);
}

// A socket node of the real workspace shows as one, and can be renamed (its copy is a new node:
// nothing listens there) while the real one stays.
TEST(CowFsSockets, SocketNodesOfTheWorkspaceCanBeRenamed) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ASSERT_EQ(python("import os, socket, sys\n"
                   "os.chdir(sys.argv[1])\n"
                   "socket.socket(socket.AF_UNIX).bind('real.sock')\n"
                   "os.chmod('real.sock', 0o751)\n",
                   m.lower()),
            "");
  const std::string lower_before = tree_manifest(m.lower(), true);
  ASSERT_EQ(m.start(), "");
  EXPECT_EQ(python("import errno, os, socket, stat, sys\n"
                   "os.chdir(sys.argv[1])\n"
                   "os.rename('real.sock', 'moved.sock')\n"
                   "st = os.lstat('moved.sock')\n"
                   "print(stat.S_ISSOCK(st.st_mode), oct(st.st_mode & 0o7777))\n"
                   "try:\n"
                   "    socket.socket(socket.AF_UNIX).connect('moved.sock')\n"
                   "except OSError as e:\n"
                   "    print(errno.errorcode[e.errno])\n"
                   "print(sorted(os.listdir('.')))\n",
                   m.mnt()),
            "True 0o751\nECONNREFUSED\n['moved.sock']\n");
  EXPECT_EQ(tree_manifest(m.lower(), true), lower_before);
  struct stat st {};
  ASSERT_EQ(::lstat(m.upper("moved.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
}

// A socket node is only a name: a host process listening on a socket of the real workspace is
// not reached through the view (the view's inode is not the one it is bound to), nor is a socket
// bound in the view reached through its node in the upper layer.
TEST(CowFsSockets, HostListenerInTheWorkspaceIsNotReachedThroughTheView) {
  CORDON_REQUIRE(fuse_available(), kFuseWhy);
  MountedFs m(kOpenPolicy);
  ASSERT_EQ(m.start(), "");
  EXPECT_EQ(
      python("import errno, os, socket, sys\n"
             "lower, mnt, upper = sys.argv[1].split('|')\n"
             "host = socket.socket(socket.AF_UNIX)\n"
             "host.bind(lower + '/host.sock')\n"
             "host.listen(4)\n"
             "inner = socket.socket(socket.AF_UNIX)\n"
             "inner.bind(mnt + '/inner.sock')\n"
             "inner.listen(4)\n"
             "for path in (mnt + '/host.sock', upper + '/inner.sock', lower + '/host.sock'):\n"
             "    c = socket.socket(socket.AF_UNIX)\n"
             "    try:\n"
             "        c.connect(path)\n"
             "        print(os.path.basename(os.path.dirname(path)), 'connected')\n"
             "    except OSError as e:\n"
             "        print(os.path.basename(os.path.dirname(path)), errno.errorcode[e.errno])\n",
             m.lower() + "|" + m.mnt() + "|" + m.upper()),
      "mnt ECONNREFUSED\nupper ECONNREFUSED\nlower connected\n");
}

}  // namespace
}  // namespace cordon::fusefs::testing
