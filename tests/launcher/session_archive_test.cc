// `cordon export` / `cordon import` end to end: a real cow session shipped to another state
// directory reviews the same there, and hostile archives (made here with python3's tarfile) are
// refused with nothing left behind, inside the state directory or outside it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/launcher/review_fixture.h"

namespace cordon::testing {
namespace {

namespace fs = std::filesystem;

// `cordon ARGS...` with CORDON_STATE_DIR=state instead of the fixture's.
RunResult cordon_in(SandboxFixture& f, const std::string& state, std::vector<std::string> args) {
  std::vector<std::string> env;
  for (const auto& e : f.env()) {
    if (!e.starts_with("CORDON_STATE_DIR=")) {
      env.push_back(e);
    }
  }
  env.push_back("CORDON_STATE_DIR=" + state);
  args.insert(args.begin(), cordon_bin());
  return run_program(args, RunSpec{.env = env, .cwd = f.ws()});
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
  auto diff2 = cordon_in(f, other.path(), {"diff", "last"});
  ASSERT_EQ(diff2.exit_code(), 0) << diff2.err;
  EXPECT_EQ(diff2.out, diff1.out);
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
  EXPECT_NE(commit.err.find("imported from an archive"), std::string::npos) << commit.err;
  EXPECT_EQ(tree_state(f.ws()), before);

  // The same id again is refused; --as gives another one.
  EXPECT_EQ(cordon_in(f, other.path(), {"import", archive}).exit_code(), 1);
  auto as = cordon_in(f, other.path(), {"import", archive, "--as", "20200101-000000-abcdef"});
  EXPECT_EQ(as.exit_code(), 0) << as.err;
  std::string renamed = diff1.out;
  const std::string id = renamed.substr(renamed.find("session ") + 8, 22);
  renamed.replace(renamed.find(id), id.size(), "20200101-000000-abcdef");
  EXPECT_EQ(cordon_in(f, other.path(), {"diff", "20200101-000000-abcdef"}).out, renamed);
  EXPECT_EQ(cordon_in(f, other.path(), {"log", "20200101-000000-abcdef", "--verify"}).exit_code(),
            0);
}

// A layer of the kernel overlayfs fallback holds device-node whiteouts, which import refuses:
// export says so rather than ship an archive no cordon would read.
TEST(SessionArchive, OverlayLayerIsRefusedByExport) {
  SandboxFixture f;
  use_backend(f, "overlay");
  write_text(f.ws() + "/gone.txt", "x\n");
  f.make_workspace_owned();
  if (::geteuid() == 0) {
    ASSERT_EQ(
        ::chown((f.ws() + "/gone.txt").c_str(), SandboxFixture::kTestUid, SandboxFixture::kTestUid),
        0);
  }
  auto r = f.run({}, {"/bin/sh", "-c", "rm gone.txt"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  TempDir out;
  auto ex = cordon(f, {"export", "last", "-o", out.path() + "/s.tar"});
  EXPECT_EQ(ex.exit_code(), 1) << ex.err;
  EXPECT_NE(ex.err.find("ran on the kernel overlayfs fallback"), std::string::npos) << ex.err;
  EXPECT_FALSE(fs::exists(out.path() + "/s.tar")) << "a half archive was left";
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
def start(t):
    reg(t, "manifest.json", M); typ(t, "session", tarfile.DIRTYPE)
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

}  // namespace
}  // namespace cordon::testing
