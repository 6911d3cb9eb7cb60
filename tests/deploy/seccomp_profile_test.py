#!/usr/bin/env python3
"""deploy/seccomp/cordon.json applied as a container runtime applies it: compiled with libseccomp
(which runc and crun use) and loaded before exec, then cordon builds and runs a sandbox under it.
What the profile refuses fails with EPERM, what it does not name with ENOSYS."""
import argparse
import ctypes
import ctypes.util
import errno
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ARGS = None

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_ERRNO = 0x00050000


class Libseccomp:
    def __init__(self):
        path = ctypes.util.find_library("seccomp")
        if path is None:
            raise RuntimeError("libseccomp (libseccomp2) is needed")
        self.lib = ctypes.CDLL(path, use_errno=True)
        self.lib.seccomp_init.restype = ctypes.c_void_p
        self.lib.seccomp_init.argtypes = [ctypes.c_uint32]
        self.lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                              ctypes.c_uint]
        self.lib.seccomp_load.argtypes = [ctypes.c_void_p]
        self.lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]

    def action(self, name, errno_ret):
        if name == "SCMP_ACT_ALLOW":
            return SCMP_ACT_ALLOW
        if name == "SCMP_ACT_ERRNO":
            return SCMP_ACT_ERRNO | (errno_ret & 0xFFFF)
        raise ValueError(f"action {name} is not used by cordon.json")

    def compile(self, profile):
        """The filter for this machine's architecture; names it lacks are skipped, as the
        runtimes skip them."""
        ctx = self.lib.seccomp_init(
            self.action(profile["defaultAction"], profile.get("defaultErrnoRet", errno.EPERM)))
        if not ctx:
            raise RuntimeError("seccomp_init failed")
        for entry in profile["syscalls"]:
            act = self.action(entry["action"], entry.get("errnoRet", errno.EPERM))
            for name in entry["names"]:
                nr = self.lib.seccomp_syscall_resolve_name(name.encode())
                if nr < 0:
                    continue
                rc = self.lib.seccomp_rule_add(ctx, act, nr, 0)
                if rc != 0:
                    raise RuntimeError(f"seccomp_rule_add({name}): {rc}")
        return ctx


def run_under_profile(argv, **kw):
    """Runs argv with the profile loaded between fork and exec (libseccomp sets no_new_privs)."""
    seccomp = Libseccomp()
    profile = json.loads((Path(ARGS.source) / "deploy/seccomp/cordon.json").read_text())
    ctx = seccomp.compile(profile)

    def load():
        if seccomp.lib.seccomp_load(ctx) != 0:
            os._exit(99)

    return subprocess.run(argv, preexec_fn=load, capture_output=True, text=True, timeout=120,
                          **kw)


class SeccompProfile(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(dir=os.environ.get("CORDON_TEST_TMP"))
        self.addCleanup(self.tmp.cleanup)
        root = Path(self.tmp.name)
        os.chmod(root, 0o755)
        (root / "state").mkdir()
        (root / "ws").mkdir()
        (root / "ws" / "a.txt").write_text("hi\n")
        self.root = root
        self.env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": str(root), "LANG": "C"}

    def test_cordon_doctor_finds_namespaces_proc_seccomp_landlock_under_it(self):
        r = run_under_profile([ARGS.cordon, "doctor", "--json", "--state-dir",
                               str(self.root / "state")], env=self.env)
        self.assertIn(r.returncode, (0, 1), r.stdout + r.stderr)
        rows = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
        for name in ("namespaces", "/proc", "seccomp", "Landlock", "state dir"):
            self.assertEqual(rows[name]["state"], "ok", f"{name}: {rows[name]}")

    def test_cordon_runs_a_copy_on_write_session_under_it(self):
        r = run_under_profile(
            [ARGS.cordon, "run", "--state-dir", str(self.root / "state"), "--events-to", "stdout",
             "--workspace", str(self.root / "ws"), "--timeout", "60s", "-q", "--", "sh", "-c",
             "cat a.txt && echo changed > a.txt"], env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("hi\n", r.stdout)
        self.assertIn('"kind":"session.end"', r.stdout)
        self.assertEqual((self.root / "ws" / "a.txt").read_text(), "hi\n", "cow: untouched")
        d = subprocess.run([ARGS.cordon, "diff", "last", "--state-dir", str(self.root / "state")],
                           capture_output=True, text=True, timeout=60, env=self.env)
        self.assertIn("+changed", d.stdout, d.stderr)

    def test_refused_calls_fail_with_eperm_and_unnamed_ones_with_enosys(self):
        probe = ("import ctypes, os, sys\n"
                 "libc = ctypes.CDLL(None, use_errno=True)\n"
                 "def err(nr):\n"
                 "    libc.syscall(nr, 0, 0, 0, 0, 0)\n"
                 "    return ctypes.get_errno()\n"
                 # keyctl (250), kexec_load (246), setns (308) on x86_64; 1000 is no syscall yet.
                 "print(err(250), err(246), err(308), err(1000))\n")
        if os.uname().machine != "x86_64":
            self.skipTest("the probe uses x86_64 syscall numbers")
        r = run_under_profile([sys.executable, "-c", probe], env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), [str(errno.EPERM)] * 3 + [str(errno.ENOSYS)])


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--cordon", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
