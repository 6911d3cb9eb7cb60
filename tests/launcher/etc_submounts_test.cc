// The sandbox's /etc when the host's /etc has mounts beneath it (Docker bind-mounts hostname,
// hosts and resolv.conf there): overlayfs refuses such a lower layer in a user namespace, and
// cordon composes /etc from per-entry binds instead. The view and the protection must be the same.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "tests/launcher/sandbox_fixture.h"

namespace cordon::testing {
namespace {

// The secret directories the plan masks (kEtcSecretDirs in launcher/plan.cc).
const std::string kSecretDirs =
    "/etc/sudoers.d /etc/ssl/private /etc/NetworkManager/system-connections /etc/wireguard "
    "/etc/openvpn/server /etc/libvirt/secrets /etc/cups/ssl";

// Everything about /etc a program can observe, section by section. The fstype line tells which
// path cordon took; the mount lines give the per-mount options of /etc and everything beneath it.
std::string etc_probe(const std::string& extra) {
  return "echo '## fstype'; awk '$5==\"/etc\" {split($0,a,\" - \"); split(a[2],b,\" \"); "
         "print b[1]}' /proc/self/mountinfo; "
         "echo '## hostname'; cat /etc/hostname; "
         "echo '## hosts'; cat /etc/hosts; "
         "echo '## resolv'; cat /etc/resolv.conf; "
         "echo '## preload'; cat /etc/ld.so.preload; "
         "echo '## shadow'; stat -c '%s %a' /etc/shadow 2>&1; "
         "cat /etc/shadow >/dev/null 2>&1 && echo shadow-readable || echo shadow-refused; "
         "echo '## secretdirs'; for d in " +
         kSecretDirs +
         "; do test -d $d && echo \"$d $(stat -c %a $d) $(ls -A $d 2>/dev/null | wc -l)\" && "
         "awk -v d=$d '$5==d {print \"mask\", $4}' /proc/self/mountinfo; done; "
         "echo '## listing'; ls -A /etc; "
         "echo '## ssh'; ls -A /etc/ssh 2>&1; "
         "echo '## extra'; cat /etc/" +
         extra +
         "; "
         "echo '## writes'; touch /etc/cordon-x 2>&1; mkdir /etc/ssl/cordon-x 2>&1; "
         "echo '## mounts'; awk '$5==\"/etc\" || index($5,\"/etc/\")==1 {print $5, $6}' "
         "/proc/self/mountinfo; "
         "echo '## end'";
}

// Section `name` of a probe's output (between "## name\n" and the next "## ").
std::string section(const std::string& out, const std::string& name) {
  size_t b = out.find("## " + name + "\n");
  if (b == std::string::npos) {
    return "<missing section " + name + ">";
  }
  b += name.size() + 4;
  size_t e = out.find("## ", b);
  return out.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

// An existing regular /etc file cordon does not stage: a bind over it must show through.
std::string unstaged_etc_file() {
  for (const char* n : {"issue", "debian_version", "host.conf", "passwd"}) {
    struct stat st {};
    if (::lstat((std::string("/etc/") + n).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      return n;
    }
  }
  return "";
}

TEST(EtcSubmounts, BindMountsUnderHostEtcKeepTheSameViewAndProtection) {
  CORDON_REQUIRE_ROOT();
  const std::string extra = unstaged_etc_file();
  CORDON_REQUIRE(!extra.empty(), "no regular /etc/issue, debian_version, host.conf or passwd");
  for (const char* f : {"/etc/hostname", "/etc/hosts", "/etc/resolv.conf"}) {
    struct stat st {};
    CORDON_REQUIRE(::stat(f, &st) == 0 && S_ISREG(st.st_mode),
                   std::string(f) + " must exist as a file to be bind-mounted over");
  }
  SandboxFixture f;
  TempDir src;
  for (const char* n : {"hostname", "hosts", "resolv.conf", "extra"}) {
    write_text(src.path() + "/" + n, std::string("BOUND-") + n + "-7c2e\n");
  }

  const std::vector<std::string> cordon_argv = {
      cordon_bin(), "run",     "--workspace", f.ws(),          "-q", "--mode", "ro",
      "--",         "/bin/sh", "-c",          etc_probe(extra)};
  RunSpec spec;
  spec.env = f.env();
  spec.cwd = f.ws();

  // Reference: the same probe with the host's /etc as it is (the overlay path).
  RunResult normal = run_program(cordon_argv, spec);
  ASSERT_EQ(normal.exit_code(), 0) << normal.err;
  ASSERT_EQ(section(normal.out, "fstype"), "overlay\n") << normal.out;

  // Binds over the host's /etc files, only inside a private mount namespace (never the host's).
  std::string binds;
  for (const std::string n : {"hostname", "hosts", "resolv.conf"}) {
    binds += "mount --bind " + src.path() + "/" + n + " /etc/" + n + " && ";
  }
  binds += "mount --bind " + src.path() + "/extra /etc/" + extra + " && ";
  std::vector<std::string> argv = {"unshare", "-m", "--propagation",       "private",
                                   "/bin/sh", "-c", binds + "exec \"$@\"", "sh"};
  argv.insert(argv.end(), cordon_argv.begin(), cordon_argv.end());
  RunResult sub = run_program(argv, spec);
  ASSERT_EQ(sub.exit_code(), 0) << sub.err << sub.out;

  // The fallback ran: /etc is cordon's tmpfs of binds, not the overlay.
  EXPECT_EQ(section(sub.out, "fstype"), "tmpfs\n") << sub.out;
  // Staged files win over the host's, bound or not: cordon's hostname, hosts, resolv.conf and
  // ld.so.preload, exactly as in the normal run.
  for (const char* s : {"hostname", "hosts", "resolv", "preload"}) {
    EXPECT_EQ(section(sub.out, s), section(normal.out, s)) << s;
    EXPECT_EQ(section(sub.out, s).find("BOUND-"), std::string::npos) << s << ": " << sub.out;
  }
  EXPECT_NE(section(sub.out, "preload").find("/run/cordon/libcordon_preload.so"), std::string::npos)
      << sub.out;
  // Secrets: the masked shadow file and secret directories look exactly as in the normal run.
  EXPECT_EQ(section(sub.out, "shadow"), section(normal.out, "shadow"));
  EXPECT_NE(section(sub.out, "shadow").find("shadow-refused"), std::string::npos) << sub.out;
  EXPECT_EQ(section(sub.out, "shadow").rfind("0 ", 0), 0u) << sub.out;
  // Secret directories: the later MaskDir ops still land on top (mode 0, empty, the stage's
  // empty-dir mounted there).
  EXPECT_EQ(section(sub.out, "secretdirs"), section(normal.out, "secretdirs"));
  struct stat st {};
  if (::stat("/etc/ssl/private", &st) == 0 && S_ISDIR(st.st_mode)) {
    EXPECT_NE(section(sub.out, "secretdirs").find("/etc/ssl/private 0 0\nmask /stage/empty-dir\n"),
              std::string::npos)
        << sub.out;
  }
  EXPECT_EQ(section(sub.out, "ssh"), section(normal.out, "ssh"));
  // The same names in /etc.
  EXPECT_EQ(section(sub.out, "listing"), section(normal.out, "listing"));
  // A non-staged host file bound over shows the bound content (the mount travelled along).
  EXPECT_EQ(section(sub.out, "extra"), "BOUND-extra-7c2e\n");
  EXPECT_NE(section(normal.out, "extra"), "BOUND-extra-7c2e\n");
  // Read-only: creating in /etc or in a bound subdirectory fails with EROFS.
  const std::string writes = section(sub.out, "writes");
  size_t pos = writes.find("Read-only file system");
  EXPECT_NE(pos, std::string::npos) << writes;
  EXPECT_NE(writes.find("Read-only file system", pos + 1), std::string::npos) << writes;
  EXPECT_NE(::access("/etc/cordon-x", F_OK), 0);
  // Every mount at or beneath /etc is ro, nosuid, nodev.
  std::istringstream mounts(section(sub.out, "mounts"));
  int n = 0;
  for (std::string line; std::getline(mounts, line);) {
    ++n;
    std::string opts = "," + line.substr(line.find(' ') + 1) + ",";
    for (const char* o : {",ro,", ",nosuid,", ",nodev,"}) {
      EXPECT_NE(opts.find(o), std::string::npos) << line;
    }
  }
  EXPECT_GE(n, 5) << "expected /etc plus per-entry binds: " << sub.out;
}

// The same from an unprivileged user: its own user and mount namespace (unshare -Urm) with a bind
// over /etc files, then cordon inside, which nests its sandbox's user namespace there. The binds
// are locked to cordon's namespace just the same.
TEST(EtcSubmounts, RootlessInsideAUserNamespaceWithBindsUnderEtc) {
  const std::string extra = unstaged_etc_file();
  CORDON_REQUIRE(!extra.empty(), "no regular /etc/issue, debian_version, host.conf or passwd");
  struct stat hst {};
  CORDON_REQUIRE(::stat("/etc/hostname", &hst) == 0 && S_ISREG(hst.st_mode),
                 "/etc/hostname must exist as a file to be bind-mounted over");
  // As root, play an ordinary user (no passwd entry needed); otherwise be the user we are.
  const uid_t uid = ::geteuid() == 0 ? SandboxFixture::kTestUid : ::geteuid();
  TempDir ws, home, state, src;
  for (const TempDir* d : {&ws, &home, &state, &src}) {
    (void)!::chown(d->path().c_str(), uid, uid);
  }
  write_text(src.path() + "/hostname", "BOUND-hostname-7c2e\n");
  write_text(src.path() + "/extra", "BOUND-extra-7c2e\n");
  RunSpec spec;
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home.path(), "LANG=C.UTF-8",
              "CORDON_STATE_DIR=" + state.path()};
  spec.cwd = ws.path();
  if (::geteuid() == 0) {
    spec.uid = uid;
    spec.gid = uid;
  }
  RunResult probe = run_program({"unshare", "-Urm", "true"}, spec);
  CORDON_REQUIRE(probe.exit_code() == 0,
                 "unprivileged user namespaces (unshare -Urm failed: " + probe.err + ")");

  const std::string script = "mount --bind " + src.path() +
                             "/hostname /etc/hostname && mount --bind " + src.path() +
                             "/extra /etc/" + extra + " && exec \"$@\"";
  RunResult r = run_program(
      {"unshare", "-Urm", "/bin/sh", "-c", script, "sh", cordon_bin(), "run", "--workspace",
       ws.path(), "-q", "--mode", "ro", "--", "/bin/sh", "-c", etc_probe(extra)},
      spec);
  ASSERT_EQ(r.exit_code(), 0) << r.err << r.out;
  EXPECT_EQ(section(r.out, "fstype"), "tmpfs\n") << r.out;
  EXPECT_EQ(section(r.out, "hostname").find("BOUND-"), std::string::npos) << r.out;
  EXPECT_NE(section(r.out, "hosts").find("127.0.0.1\tlocalhost"), std::string::npos) << r.out;
  EXPECT_NE(section(r.out, "preload").find("/run/cordon/libcordon_preload.so"), std::string::npos)
      << r.out;
  EXPECT_EQ(section(r.out, "extra"), "BOUND-extra-7c2e\n");
  struct stat st {};
  if (::lstat("/etc/shadow", &st) == 0) {
    EXPECT_EQ(section(r.out, "shadow").rfind("0 0\n", 0), 0u) << r.out;
  }
  EXPECT_NE(section(r.out, "writes").find("Read-only file system"), std::string::npos) << r.out;
  std::istringstream mounts(section(r.out, "mounts"));
  for (std::string line; std::getline(mounts, line);) {
    std::string opts = "," + line.substr(line.find(' ') + 1) + ",";
    for (const char* o : {",ro,", ",nosuid,", ",nodev,"}) {
      EXPECT_NE(opts.find(o), std::string::npos) << line;
    }
  }
}

}  // namespace
}  // namespace cordon::testing
