// cow mode (the default policy's filesystem.mode): the program sees its changes, the real
// workspace stays byte-for-byte as it was, the changes wait in the session's upper/. Through
// cordon-fs where /dev/fuse is usable (root here), else kernel overlayfs (an ordinary user here,
// since this host keeps /dev/fuse 0600). Real sandboxes, as root and as an ordinary user.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "launcher/plan.h"
#include "launcher/session/session.h"
#include "policy/loader.h"
#include "tests/launcher/sandbox_fixture.h"
#include "tests/support/fuse_user.h"
#include "tests/support/tree_state.h"

namespace cordon::testing {
namespace {

namespace fs = std::filesystem;

// The upper/ the summary names: "cordon: N files changed in the copy-on-write layer (...): DIR".
std::string upper_from_summary(const std::string& err) {
  const std::string key = "(the workspace is untouched): ";
  size_t at = err.find(key);
  if (at == std::string::npos) {
    return "";
  }
  size_t end = err.find('\n', at);
  return err.substr(at + key.size(), end - at - key.size());
}

bool fuse_usable() { return ::access("/dev/fuse", R_OK | W_OK) == 0; }

// `name` in `dir` of an upper layer is marked deleted: cordon-fs's ".wh.NAME" file, or
// overlayfs' 0/0 character device.
bool is_whiteout(const std::string& dir, const std::string& name) {
  struct stat st {};
  if (fuse_usable()) {
    return ::lstat((dir + "/.wh." + name).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::lstat((dir + "/" + name).c_str(), &st) != 0;
  }
  return ::lstat((dir + "/" + name).c_str(), &st) == 0 && S_ISCHR(st.st_mode) &&
         st.st_rdev == makedev(0, 0);
}

std::string state_dir(SandboxFixture& f) {
  for (const auto& e : f.env()) {
    if (e.rfind("CORDON_STATE_DIR=", 0) == 0) {
      return e.substr(17);
    }
  }
  return "";
}

// The one session directory of a fixture's store.
std::string only_session(SandboxFixture& f) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (auto it = fs::directory_iterator(state_dir(f) + "/sessions", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    dirs.push_back(it->path().string());
  }
  return dirs.size() == 1 ? dirs[0] : "";
}

bool mounted_below(const std::string& dir) {
  std::ifstream mi("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mi, line)) {
    if (line.find(" " + dir + "/") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// A workspace with files to modify, delete and rename. As root, handed to an unprivileged uid
// (files included), as a user would own their project; as a user, it is theirs already.
uid_t populate(SandboxFixture& f) {
  write_text(f.ws() + "/mod.txt", "original\n");
  write_text(f.ws() + "/del.txt", "delete me\n");
  write_text(f.ws() + "/ren.txt", "rename me\n");
  ::mkdir((f.ws() + "/sub").c_str(), 0755);
  write_text(f.ws() + "/sub/keep.txt", "keep\n");
  uid_t uid = f.make_workspace_owned();
  if (::geteuid() == 0) {
    for (const char* p : {"/mod.txt", "/del.txt", "/ren.txt", "/sub", "/sub/keep.txt"}) {
      EXPECT_EQ(::chown((f.ws() + p).c_str(), uid, uid), 0) << p;
    }
  }
  return uid;
}

TEST(Cow, DefaultModeShowsChangesInsideAndKeepsTheWorkspaceUntouched) {
  SandboxFixture f;
  uid_t uid = populate(f);
  const std::string before = tree_state(f.ws(), TreeCheck::Untouched);

  // No --mode: the embedded default policy's "cow".
  auto r = f.run({}, {"/bin/sh", "-c",
                      "set -e; echo new > new.txt; echo more >> mod.txt; rm del.txt; mkdir newdir;"
                      " mv ren.txt renamed.txt; echo deep > sub/deep.txt;"
                      " cat mod.txt renamed.txt; ls -A | tr '\\n' ' '; echo"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "original\nmore\nrename me\nmod.txt new.txt newdir renamed.txt sub \n") << r.err;

  EXPECT_EQ(tree_state(f.ws(), TreeCheck::Untouched), before) << "the real workspace changed";
  EXPECT_EQ(read_text(f.ws() + "/mod.txt"), "original\n");
  EXPECT_EQ(::access((f.ws() + "/new.txt").c_str(), F_OK), -1);

  // new.txt, mod.txt, the del.txt and ren.txt whiteouts, newdir, renamed.txt, sub/deep.txt.
  EXPECT_NE(r.err.find("cordon: 7 files changed in the copy-on-write layer (the workspace is "
                       "untouched): "),
            std::string::npos)
      << r.err;
  const std::string upper = upper_from_summary(r.err);
  ASSERT_FALSE(upper.empty()) << r.err;
  EXPECT_EQ(read_text(upper + "/new.txt"), "new\n");
  EXPECT_EQ(read_text(upper + "/mod.txt"), "original\nmore\n");
  EXPECT_EQ(read_text(upper + "/renamed.txt"), "rename me\n");
  EXPECT_EQ(read_text(upper + "/sub/deep.txt"), "deep\n");
  EXPECT_TRUE(is_whiteout(upper, "del.txt"));
  EXPECT_TRUE(is_whiteout(upper, "ren.txt"));
  struct stat st {};
  ASSERT_EQ(::stat((upper + "/newdir").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  // The program's files belong on the host to the id it ran as: never root.
  ASSERT_EQ(::stat((upper + "/new.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid);
  EXPECT_NE(st.st_uid, 0u);

  // session.end records the count and where the layer is.
  std::string events = read_text(fs::path(upper).parent_path().string() + "/events.jsonl");
  EXPECT_NE(events.find("\"cow_changed\":7"), std::string::npos) << events;
}

TEST(Cow, EachRunStartsFromThePristineWorkspace) {
  SandboxFixture f;
  populate(f);
  auto first =
      f.run({"-q"}, {"/bin/sh", "-c", "echo changed > mod.txt; echo x > new.txt; rm del.txt"});
  ASSERT_EQ(first.exit_code(), 0) << first.err;
  auto second = f.run({"-q"}, {"/bin/sh", "-c", "cat mod.txt del.txt; ls new.txt 2>&1 || true"});
  ASSERT_EQ(second.exit_code(), 0) << second.err;
  EXPECT_EQ(second.out.substr(0, 19), "original\ndelete me\n") << second.out;
  EXPECT_NE(second.out.find("No such file"), std::string::npos) << second.out;
}

TEST(Cow, ChangesSurviveCordonBeingKilled) {
  SandboxFixture f;
  populate(f);
  std::vector<std::string> argv = {
      cordon_bin(),  "run",  "-q",
      "--workspace", f.ws(), "--",
      "/bin/sh",     "-c",   "echo kept > saved.txt; sync; echo ready; exec sleep 60"};
  Background bg(argv, f.env(), f.ws());
  ASSERT_NE(bg.read_until("ready\n").find("ready"), std::string::npos);
  ASSERT_EQ(::kill(bg.pid(), SIGKILL), 0);
  bg.wait();
  std::string state;
  for (const auto& e : f.env()) {
    if (e.rfind("CORDON_STATE_DIR=", 0) == 0) {
      state = e.substr(17);
    }
  }
  std::vector<std::string> uppers;
  for (const auto& d : fs::directory_iterator(state + "/sessions")) {
    uppers.push_back(d.path().string() + "/upper");
  }
  ASSERT_EQ(uppers.size(), 1u);
  EXPECT_EQ(read_text(uppers[0] + "/saved.txt"), "kept\n");
  EXPECT_EQ(::access((f.ws() + "/saved.txt").c_str(), F_OK), -1);
}

TEST(Cow, DeniedGlobsAreUnreadable) {
  SandboxFixture f;
  populate(f);
  write_text(f.ws() + "/.env", "TOKEN=hunter2\n");
  write_text(f.ws() + "/sub/.env", "TOKEN=hunter3\n");
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown((f.ws() + "/.env").c_str(), SandboxFixture::kTestUid, 0), 0);
  }
  auto r = f.run({"-q"}, {"/bin/sh", "-c", "cat .env sub/.env; cat < .env; echo end"});
  EXPECT_EQ(r.out, "end\n") << r.err;
  EXPECT_EQ(r.err.find("hunter"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
}

TEST(Cow, ProtectedFilesAreReadOnly) {
  SandboxFixture f;
  populate(f);
  ::mkdir((f.ws() + "/.git").c_str(), 0755);
  write_text(f.ws() + "/.git/config", "[core]\n");
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown((f.ws() + "/.git").c_str(), SandboxFixture::kTestUid, 0), 0);
    ASSERT_EQ(::chown((f.ws() + "/.git/config").c_str(), SandboxFixture::kTestUid, 0), 0);
  }
  auto r = f.run({"-q"}, {"/bin/sh", "-c",
                          "echo evil >> .git/config && echo WROTE; cat .git/config; echo ok > x"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "[core]\n") << r.err;
  // cordon-fs refuses the write itself (EACCES); overlayfs sits under a read-only bind (EROFS).
  EXPECT_NE(r.err.find(fuse_usable() ? "Permission denied" : "Read-only file system"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(read_text(f.ws() + "/.git/config"), "[core]\n");
}

TEST(Cow, NoFlagsAtAllRunsInTheCurrentDirectory) {
  SandboxFixture f;
  f.make_workspace_owned();
  auto r = run_program({cordon_bin(), "run", "--", "true"}, RunSpec{.env = f.env(), .cwd = f.ws()});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.err.find("cordon: 0 files changed in the copy-on-write layer"), std::string::npos)
      << r.err;
  auto pwd =
      run_program({cordon_bin(), "run", "-q", "--", "pwd"}, RunSpec{.env = f.env(), .cwd = f.ws()});
  EXPECT_EQ(pwd.exit_code(), 0) << pwd.err;
  EXPECT_EQ(pwd.out, f.ws() + "\n");
}

TEST(Cow, SessionStoreInsideTheWorkspaceIsRefused) {
  SandboxFixture f;
  f.make_workspace_owned();
  const std::string before = tree_state(f.ws(), TreeCheck::Untouched);
  std::vector<std::string> env = f.env();
  for (auto& e : env) {
    if (e.rfind("CORDON_STATE_DIR=", 0) == 0) {
      e = "CORDON_STATE_DIR=" + f.ws() + "/state";
    }
  }
  auto r = run_program({cordon_bin(), "run", "--workspace", f.ws(), "--", "true"},
                       RunSpec{.env = env, .cwd = f.ws()});
  EXPECT_EQ(r.exit_code(), 125);
  EXPECT_NE(r.err.find("is inside the workspace"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--mode ro or rw"), std::string::npos) << r.err;
  EXPECT_EQ(tree_state(f.ws(), TreeCheck::Untouched), before);
}

// The copy-on-write overlay cannot be built (here: the session store sits on an overlayfs, which
// overlayfs refuses as an upper layer): cordon must stop, say why and how to go on, and never run
// the program with the workspace writable instead.
TEST(Cow, OverlayRefusalFailsClosed) {
  CORDON_REQUIRE_ROOT();  // mounting the overlay that hosts the session store needs host root
  SandboxFixture f;
  f.make_workspace_owned();
  TempDir layers;
  for (const char* d : {"/l", "/u", "/w", "/m"}) {
    ASSERT_EQ(::mkdir((layers.path() + d).c_str(), 0755), 0);
  }
  const std::string store = layers.path() + "/m";
  const std::string opts = "lowerdir=" + layers.path() + "/l,upperdir=" + layers.path() +
                           "/u,workdir=" + layers.path() + "/w";
  ASSERT_EQ(::mount("overlay", store.c_str(), "overlay", 0, opts.c_str()), 0) << strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{store};
  std::vector<std::string> env = f.env();
  for (auto& e : env) {
    if (e.rfind("CORDON_STATE_DIR=", 0) == 0) {
      e = "CORDON_STATE_DIR=" + store;
    }
  }
  env.push_back("CORDON_COW_BACKEND=overlay");  // this test is about the overlay fallback
  const std::string before = tree_state(f.ws(), TreeCheck::Untouched);
  auto r = run_program({cordon_bin(), "run", "--", "/bin/sh", "-c", "echo ran > ran.txt"},
                       RunSpec{.env = env, .cwd = f.ws()});
  EXPECT_EQ(r.exit_code(), 125) << r.err;
  EXPECT_NE(r.err.find("mounting the copy-on-write workspace " + f.ws()), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("upperdir"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Invalid argument"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("use --mode ro or --mode rw"), std::string::npos) << r.err;
  EXPECT_EQ(tree_state(f.ws(), TreeCheck::Untouched), before) << "the program must not have run";
}

// cordon-fs decides the path policy at each lookup: a secret the program creates after start is
// as unreadable as one that was there (the old start-time masks could not cover it).
TEST(Cow, DeniedFileCreatedLaterInsideTheSandboxIsUnreadable) {
  CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
  SandboxFixture f;
  populate(f);
  auto r = f.run({"-q"}, {"/bin/sh", "-c",
                          "echo TOKEN=hunter2 > .env; mkdir -p deep/er; echo k > deep/er/id.pem;"
                          " cat .env deep/er/id.pem; cp mod.txt sub/.env; cat sub/.env;"
                          " mv mod.txt x.pem; cat x.pem; echo end"});
  EXPECT_EQ(r.out, "end\n") << r.err;
  EXPECT_EQ(r.err.find("hunter2"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("original"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(".env: Permission denied"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("id.pem: Permission denied"), std::string::npos) << r.err;
  // Each refusal is an event naming the rule and the process.
  std::string events = read_text(only_session(f) + "/events.jsonl");
  EXPECT_NE(events.find("\"kind\":\"fs.refused\""), std::string::npos) << events;
  EXPECT_NE(events.find("\"rule\":\"filesystem.deny["), std::string::npos) << events;
  EXPECT_NE(events.find("\"path\":\".env\""), std::string::npos) << events;
  // Joined with the preload shim's record of the same process: the refusal names its command.
  size_t cat_refusals = 0;
  for (size_t at = 0, nl; at < events.size(); at = nl + 1) {
    nl = events.find('\n', at);
    if (nl == std::string::npos) nl = events.size();
    auto ev = nlohmann::json::parse(events.substr(at, nl - at), nullptr, false);
    if (ev.is_object() && ev.value("kind", "") == "fs.attribution" &&
        ev.value("path", "") == ".env" && ev.value("exe", "") == "/usr/bin/cat") {
      EXPECT_EQ(ev["argv"], nlohmann::json::array({"cat", ".env", "deep/er/id.pem"})) << ev;
      ++cat_refusals;
    }
  }
  EXPECT_GE(cat_refusals, 1u) << events;
}

// kill -9 of cordon-fs while the program runs: every access fails (ENOTCONN); nothing falls
// through to the real tree, which stays untouched; cordon says so at the end and leaves no mount.
// After cordon-fs dies, requests caught in flight over FUSE's io_uring transport fail with
// ECANCELED or ECONNABORTED while the kernel tears the rings down (asynchronously, after the
// daemon's death); once that is done every access gets ENOTCONN. The shell waits out that window
// (bounded: 5 s) and prints anything else it sees, so a read that succeeds still fails the test.
const std::string kSettleAfterKill =
    " i=0; while [ $i -lt 100 ]; do o=$(cat mod.txt 2>&1); case $o in"
    " *'not connected'*) break;; *'Operation canceled'*|*'connection abort'*) ;;"
    " *) echo \"unexpected: $o\"; break;; esac; i=$((i+1)); sleep 0.05; done;";

TEST(Cow, CordonFsKilledMidRunMakesTheWorkspaceFailNotTheRealTree) {
  CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
  SandboxFixture f;
  populate(f);
  const std::string before = tree_state(f.ws(), TreeCheck::Untouched);
  std::vector<std::string> argv = {
      cordon_bin(), "run", "--workspace", f.ws(), "--", "/bin/sh", "-c",
      // cat opens the file, which asks cordon-fs (a stat could be answered from the kernel's
      // attribute cache, which outlives the daemon; it holds metadata only).
      "echo kept > saved.txt; echo ready; while cat saved.txt >/dev/null; do sleep 0.05; done;" +
          kSettleAfterKill + " cat mod.txt 2>&1; ls; echo x > new.txt; echo end"};
  Background bg(argv, f.env(), f.ws());
  ASSERT_NE(bg.read_until("ready\n").find("ready"), std::string::npos);
  const std::string session = only_session(f);
  long pid = std::stol(read_text(session + "/cordon-fs.pid"));
  ASSERT_EQ(read_text("/proc/" + std::to_string(pid) + "/comm"), "cordon-fs\n");
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  EXPECT_EQ(bg.wait(), 0);
  EXPECT_EQ(bg.text(), "ready\ncat: mod.txt: Transport endpoint is not connected\nend\n")
      << "the program read something after cordon-fs died";
  EXPECT_EQ(tree_state(f.ws(), TreeCheck::Untouched), before);
  EXPECT_EQ(read_text(session + "/upper/saved.txt"), "kept\n") << "the layer must survive";
  EXPECT_FALSE(mounted_below(session)) << "cordon left the dead mount behind";
}

TEST(Cow, CordonFsKilledMidRunIsReportedWithENOTCONN) {
  CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
  SandboxFixture f;
  populate(f);
  std::vector<std::string> argv = {
      cordon_bin(),
      "run",
      "--workspace",
      f.ws(),
      "--",
      "/bin/sh",
      "-c",
      "echo ready; while cat mod.txt >/dev/null 2>&1; do sleep 0.05; done;" + kSettleAfterKill +
          " cat mod.txt 2>&1; echo end"};
  // Bounds generous enough for a loaded 2-core machine: the test is about what happens after
  // the kill, not how soon the session starts.
  RunSpec spec{.env = f.env(), .deadline = std::chrono::seconds(150), .cwd = f.ws()};
  std::thread killer([&] {
    for (int i = 0; i < 2400 && only_session(f).empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    std::string pidfile = only_session(f) + "/cordon-fs.pid";
    for (int i = 0; i < 2400 && read_text(pidfile).empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::string pid = read_text(pidfile);
    if (!pid.empty()) {
      ::kill(static_cast<pid_t>(std::stol(pid)), SIGKILL);
    }
  });
  auto r = run_program(argv, spec);
  killer.join();
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.out.find("cat: mod.txt: Transport endpoint is not connected\nend\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("cordon: warning: cordon-fs ended during the session (signal 9"),
            std::string::npos)
      << r.err;
}

// A cordon-fs that cannot start: cordon stops before the program runs, with cordon-fs's words.
TEST(Cow, CordonFsThatCannotStartFailsClosed) {
  CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
  SandboxFixture f;
  populate(f);
  const std::string before = tree_state(f.ws(), TreeCheck::Untouched);
  f.env().push_back("CORDON_FS_BIN=/bin/false");
  auto r = f.run({}, {"/bin/sh", "-c", "echo ran > ran.txt; echo ran"});
  EXPECT_EQ(r.exit_code(), 125) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("cordon-fs (/bin/false) exited before mounting (exit 1)"), std::string::npos)
      << r.err;
  EXPECT_EQ(tree_state(f.ws(), TreeCheck::Untouched), before);
}

// cordon and cordon-fs both SIGKILLed: the dead mount stays on the host until the next cordon
// command detaches it.
TEST(Cow, StaleMountAfterACrashIsDetachedByTheNextCommand) {
  CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
  SandboxFixture f;
  populate(f);
  std::vector<std::string> argv = {cordon_bin(),  "run",  "-q",
                                   "--workspace", f.ws(), "--",
                                   "/bin/sh",     "-c",   "echo k > k.txt; echo ready; sleep 60"};
  Background bg(argv, f.env(), f.ws());
  ASSERT_NE(bg.read_until("ready\n").find("ready"), std::string::npos);
  const std::string session = only_session(f);
  long pid = std::stol(read_text(session + "/cordon-fs.pid"));
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  ASSERT_EQ(::kill(bg.pid(), SIGKILL), 0);
  bg.wait();
  struct Detach {  // should the test fail, it must not leave the dead mount on the host
    std::string path;
    ~Detach() { ::umount2(path.c_str(), MNT_DETACH); }
  } detach{session + "/mnt"};
  ASSERT_TRUE(mounted_below(session)) << "expected the dead mount to be left behind";
  auto d =
      run_program({cordon_bin(), "diff", "last", "--stat"}, RunSpec{.env = f.env(), .cwd = f.ws()});
  EXPECT_EQ(d.exit_code(), 0) << d.err;
  EXPECT_NE(d.out.find("A k.txt  (2 bytes, 0644)\n"), std::string::npos) << d.out;
  EXPECT_FALSE(mounted_below(session)) << "cordon diff did not detach the stale mount";
}

// The plan through cordon-fs: the workspace is the daemon's view, and workspace-relative rules
// get no start-time masks (cordon-fs decides them at each lookup); absolute ones still do.
TEST(Cow, PlanThroughCordonFsLeavesRelativeRulesToTheDaemon) {
  TempDir ws, home;
  write_text(ws.path() + "/.env", "x");
  write_text(ws.path() + "/abs.key", "x");
  ::mkdir((ws.path() + "/.git").c_str(), 0755);
  write_text(ws.path() + "/.git/config", "x");
  policy::Policy p = policy::default_policy();  // cow, **/.env denied, .git/config protected
  p.filesystem.workspace = ws.path();
  std::string why;
  auto abs = policy::PathPattern::parse(ws.path() + "/abs.key", "", &why);
  ASSERT_TRUE(abs) << why;
  p.filesystem.deny.push_back(*abs);
  launcher::HostFacts h;
  h.euid = 1000;
  h.egid = 1000;
  h.cwd = ws.path();
  h.home = home.path();
  static char* empty_env[] = {nullptr};
  h.env = empty_env;
  auto count = [&](const launcher::LaunchPlan& plan, launcher::MountKind k, const std::string& t) {
    size_t n = 0;
    for (const auto& m : plan.mounts) {
      n += m.kind == k && m.target == t;
    }
    return n;
  };
  auto overlay = launcher::build_plan(p, {"true"}, h);
  ASSERT_TRUE(overlay.ok()) << overlay.error().to_string();
  EXPECT_FALSE(overlay->cow_fuse);
  EXPECT_EQ(count(*overlay, launcher::MountKind::CowOverlay, ws.path()), 1u);
  EXPECT_EQ(count(*overlay, launcher::MountKind::MaskFile, ws.path() + "/.env"), 1u);
  EXPECT_EQ(count(*overlay, launcher::MountKind::BindRo, ws.path() + "/.git/config"), 1u);

  h.cow_fuse = true;
  auto fuse = launcher::build_plan(p, {"true"}, h);
  ASSERT_TRUE(fuse.ok()) << fuse.error().to_string();
  EXPECT_TRUE(fuse->cow_fuse);
  EXPECT_EQ(count(*fuse, launcher::MountKind::CowFuse, ws.path()), 1u);
  EXPECT_EQ(count(*fuse, launcher::MountKind::CowOverlay, ws.path()), 0u);
  EXPECT_EQ(count(*fuse, launcher::MountKind::MaskFile, ws.path() + "/.env"), 0u);
  EXPECT_EQ(count(*fuse, launcher::MountKind::BindRo, ws.path() + "/.git/config"), 0u);
  // Absolute rules too: cordon-fs decides them on the host path of each workspace path.
  EXPECT_EQ(count(*fuse, launcher::MountKind::MaskFile, ws.path() + "/abs.key"), 0u);
}

TEST(Cow, SummaryLineSaysHowManyAndWhere) {
  launcher::SessionEnd end;
  EXPECT_EQ(launcher::format_summary("X", end).find("copy-on-write"), std::string::npos);
  end.cow_upper = "/s/X/upper";
  end.cow_changed = 1;
  EXPECT_NE(launcher::format_summary("X", end).find(
                "cordon: 1 file changed in the copy-on-write layer (the workspace is "
                "untouched): /s/X/upper\n"),
            std::string::npos);
  EXPECT_NE(
      launcher::format_summary("X", end).find(
          "cordon: review: cordon diff X   apply: cordon commit X   undo: cordon rollback X\n"),
      std::string::npos);
  // An overlayfs-fallback session is reviewed the same way.
  end.cow_fallback = "/dev/fuse not usable";
  EXPECT_NE(launcher::format_summary("X", end).find("cordon: review: cordon diff X"),
            std::string::npos);
  EXPECT_NE(launcher::format_summary("X", end).find("protected paths are held back at commit"),
            std::string::npos);
  end.cow_changed = 100000;
  end.cow_changed_more = true;
  EXPECT_NE(launcher::format_summary("X", end).find("cordon: more than 100000 files changed"),
            std::string::npos);
}

TEST(Cow, CountStopsAtItsBound) {
  TempDir upper, lower;
  for (int i = 0; i < 5; ++i) {
    write_text(upper.path() + "/f" + std::to_string(i), "x");
  }
  ::mkdir((upper.path() + "/old").c_str(), 0755);  // copied up: the lower has it
  ::mkdir((lower.path() + "/old").c_str(), 0755);
  write_text(upper.path() + "/old/g", "x");
  auto all = launcher::count_cow_changes(upper.path(), lower.path(), 100);
  EXPECT_EQ(all.count, 6u);
  EXPECT_FALSE(all.more);
  auto some = launcher::count_cow_changes(upper.path(), lower.path(), 3);
  EXPECT_TRUE(some.more);
  EXPECT_LE(some.count, 3u);
}

// ---- the copy-on-write workspace belongs to the agent ----------------------------------------

// Work an agent does on existing files it did not create: run inside the sandbox, in the root of
// a workspace holding GPL-3, BSD, Artistic and Apache-2.0 (each a copy of Debian's license text)
// and an empty directory empty/ (when `with_dir`).
std::string agent_work(bool with_dir) {
  return std::string(
             "set -e; id -u; echo appended >> GPL-3; tail -n 1 GPL-3; rm BSD;"
             " chmod 600 Artistic; touch -d @1000000000 Artistic;"
             " mv Apache-2.0 Apache.moved; echo new > new.txt; mkdir newdir;"
             " mkdir d; rmdir d;") +
         (with_dir ? " rmdir empty;" : "") + " stat -c '%a %Y' Artistic; cat new.txt";
}

std::string agent_work_output(uid_t uid) {
  return std::to_string(uid) + "\nappended\n600 1000000000\nnew\n";
}

// A workspace like agent_work() expects, owned by root (the test's uid when run as root).
void populate_licenses(const std::string& ws) {
  for (const char* name : {"GPL-3", "BSD", "Artistic", "Apache-2.0"}) {
    write_text(ws + "/" + name, read_text(std::string("/usr/share/common-licenses/") + name));
  }
  ASSERT_EQ(::mkdir((ws + "/empty").c_str(), 0755), 0);
}

// `cordon diff last --stat` lists every change agent_work() made.
void expect_agent_work_in_diff(const RunResult& d, bool with_dir) {
  EXPECT_EQ(d.exit_code(), 0) << d.err;
  const std::string out = "\n" + d.out;
  for (const char* line : {"M GPL-3", "D BSD", "M Artistic", "R Apache-2.0 -> Apache.moved",
                           "A new.txt", "A newdir/"}) {
    EXPECT_NE(out.find(std::string("\n") + line), std::string::npos) << line << "\n" << d.out;
  }
  if (with_dir) {
    EXPECT_NE(out.find("\nD empty/"), std::string::npos) << d.out;
  }
}

// As root in a root-owned workspace the program runs as nobody (or as $SUDO_UID): through
// cordon-fs the workspace's files are its own to write, edit, delete, chmod and rename, the real
// tree stays untouched, and the diff shows the work. Nothing is said about modes (no need).
TEST(Cow, RootOwnedWorkspaceIsTheAgentsCopy) {
  CORDON_REQUIRE_ROOT();
  CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
  for (uid_t sudo : {0u, 4343u}) {
    SandboxFixture f;
    populate_licenses(f.ws());
    if (sudo != 0) {
      f.env().push_back("SUDO_UID=" + std::to_string(sudo));
      f.env().push_back("SUDO_GID=" + std::to_string(sudo));
    }
    const std::string before = tree_state(f.ws(), TreeCheck::Untouched);
    auto r = f.run({}, {"/bin/sh", "-c", agent_work(true)});
    ASSERT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_EQ(r.out, agent_work_output(sudo != 0 ? sudo : 65534)) << r.err;
    EXPECT_EQ(r.err.find("cannot"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("(nobody)"), std::string::npos) << r.err;
    EXPECT_EQ(tree_state(f.ws(), TreeCheck::Untouched), before) << "the real workspace changed";
    auto d = run_program({cordon_bin(), "diff", "last", "--stat"},
                         RunSpec{.env = f.env(), .cwd = f.ws()});
    expect_agent_work_in_diff(d, true);
    // On the host the upper layer holds the owner's (root's) files, never the sandbox's id.
    const std::string upper = only_session(f) + "/upper";
    struct stat st {};
    for (const char* p : {"/new.txt", "/GPL-3", "/Artistic", "/newdir"}) {
      ASSERT_EQ(::lstat((upper + p).c_str(), &st), 0) << p;
      EXPECT_EQ(st.st_uid, 0u) << p;
    }
  }
}

// Rootless through cordon-fs, in a workspace another user (root) owns and others may only read:
// the agent still gets its own writable copy. As root the test runs cordon as an unprivileged
// user that may use FUSE, over a root-owned workspace it builds; as that user, over a directory of
// the system that root owns (Debian's license texts).
TEST(Cow, RootlessAgentOwnsItsCopyOfARootOwnedWorkspace) {
  TempDir ws, home, state;
  std::string workspace = ws.path();
  RunSpec spec;
  uid_t uid = ::geteuid();
  if (uid == 0) {
    auto user = fuse_user();
    CORDON_REQUIRE(user.has_value(), kFuseUserWhy);
    populate_licenses(workspace);
    for (const TempDir* d : {&home, &state}) {
      ASSERT_EQ(::chown(d->path().c_str(), user->uid, user->gid), 0);
    }
    spec.uid = uid = user->uid;
    spec.gid = user->gid;
  } else {
    CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
    workspace = "/usr/share/common-licenses";
  }
  struct stat st {};
  ASSERT_EQ(::stat(workspace.c_str(), &st), 0);
  ASSERT_EQ(st.st_uid, 0u) << "the workspace must be another user's";
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home.path(), "LANG=C.UTF-8",
              "CORDON_STATE_DIR=" + state.path()};
  spec.cwd = workspace;
  const std::string before = tree_state(workspace, TreeCheck::Untouched);
  auto r = run_program(
      {cordon_bin(), "run", "--workspace", workspace, "--", "/bin/sh", "-c", agent_work(false)},
      spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, agent_work_output(uid)) << r.err;
  EXPECT_EQ(r.err.find("kernel overlayfs"), std::string::npos)
      << "not through cordon-fs: " << r.err;
  EXPECT_EQ(tree_state(workspace, TreeCheck::Untouched), before) << "the real workspace changed";
  auto d = run_program({cordon_bin(), "diff", "last", "--stat"}, spec);
  expect_agent_work_in_diff(d, false);
}

// Files of other owners keep their owners and modes: root's 0600 file in a user's workspace stays
// unreadable to the agent (the workspace's owner), whose own files are its to change.
TEST(Cow, OtherOwnersFilesKeepTheirModes) {
  CORDON_REQUIRE_ROOT();
  CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
  SandboxFixture f;
  populate(f);
  write_text(f.ws() + "/root-secret", "hunter2\n", 0600);
  const std::string before = tree_state(f.ws(), TreeCheck::Untouched);
  auto r = f.run({"-q"}, {"/bin/sh", "-c",
                          "cat root-secret; echo x > root-secret; chmod 644 root-secret;"
                          " echo more >> mod.txt && chmod 600 mod.txt && echo own-ok"});
  EXPECT_EQ(r.out, "own-ok\n") << r.err;
  EXPECT_EQ(r.err.find("hunter2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cat: root-secret: Permission denied"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cannot create root-secret: Permission denied"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("chmod: changing permissions of 'root-secret': Operation not permitted"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(tree_state(f.ws(), TreeCheck::Untouched), before);
}

// A unix socket bound in the workspace reaches a client in another process of the sandbox; the
// socket's node lands in the upper layer, never in the real workspace.
TEST(Cow, UnixSocketsInTheWorkspace) {
  CORDON_REQUIRE(fuse_usable(), "/dev/fuse usable by this uid (cordon-fs)");
  SandboxFixture f;
  populate(f);
  const std::string before = tree_state(f.ws(), TreeCheck::Untouched);
  auto r = f.run({"-q"}, {"/usr/bin/python3", "-c",
                          "import os, socket\n"
                          "s = socket.socket(socket.AF_UNIX)\n"
                          "s.bind('sub/agent.sock')\n"
                          "s.listen(1)\n"
                          "pid = os.fork()\n"
                          "if pid == 0:\n"
                          "    c = socket.socket(socket.AF_UNIX)\n"
                          "    c.connect('sub/agent.sock')\n"
                          "    c.sendall(b'hello from %d' % os.getpid())\n"
                          "    os._exit(0 if c.recv(16) == b'ack' else 1)\n"
                          "a, _ = s.accept()\n"
                          "got = a.recv(64)\n"
                          "a.sendall(b'ack')\n"
                          "_, st = os.waitpid(pid, 0)\n"
                          "print(got == b'hello from %d' % pid, os.waitstatus_to_exitcode(st))\n"});
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.out, "True 0\n") << r.err;
  EXPECT_EQ(tree_state(f.ws(), TreeCheck::Untouched), before);
  struct stat st {};
  ASSERT_EQ(::lstat((only_session(f) + "/upper/sub/agent.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
}

}  // namespace
}  // namespace cordon::testing
