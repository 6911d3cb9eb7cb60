#!/usr/bin/env python3
"""deploy/ checked offline: every Kubernetes manifest parses and holds the settings cordon needs,
the seccomp profile is a well-formed OCI/Docker profile that lets cordon build its sandbox, and
the container command is one the built cordon's own parser accepts."""
import argparse
import ctypes
import ctypes.util
import json
import re
import subprocess
import sys
import unittest
from pathlib import Path

import yaml

ARGS = None

MANIFESTS = ["job.yaml", "pod-template.yaml", "sandbox-template.yaml"]

# What cordon calls to build a sandbox (launcher/sandbox/, launcher/doctor/): the profile must
# allow each one outright.
NEEDED_SYSCALLS = [
    "clone", "clone3", "unshare", "mount", "umount2", "pivot_root", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "mount_setattr", "sethostname", "seccomp", "prctl",
    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self", "pidfd_open",
    "pidfd_send_signal", "pidfd_getfd", "ioctl", "socket", "execve", "openat", "read", "write",
    "wait4", "waitid", "setsockopt", "sendmsg", "recvmsg", "arch_prctl",
]
# What cordon itself uses although its own filter refuses it to the program.
CORDON_OWN_USE = {"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
                  "fsconfig", "fsmount", "fspick", "mount_setattr"}
ACTIONS = {"SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS",
           "SCMP_ACT_KILL_THREAD", "SCMP_ACT_TRAP", "SCMP_ACT_TRACE", "SCMP_ACT_LOG",
           "SCMP_ACT_NOTIFY"}
ARCHES = {"SCMP_ARCH_X86", "SCMP_ARCH_X86_64", "SCMP_ARCH_X32", "SCMP_ARCH_ARM",
          "SCMP_ARCH_AARCH64", "SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64", "SCMP_ARCH_PPC64LE",
          "SCMP_ARCH_S390X", "SCMP_ARCH_RISCV64"}

SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40,
              "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def kube_bytes(q):
    """A Kubernetes quantity (2Gi, 512Mi) in bytes; decimal suffixes are refused on purpose."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", str(q))
    if not m:
        raise ValueError(f"memory quantity {q!r}: use a binary suffix (Mi, Gi)")
    return int(m.group(1)) * SIZE_UNITS[m.group(2) or ""]


def cordon_bytes(s):
    """A size in the policy's syntax (1G, 512M: binary units)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", str(s))
    if not m:
        raise ValueError(f"policy size {s!r}")
    return int(float(m.group(1)) * SIZE_UNITS[m.group(2)])


def kube_cpu(q):
    q = str(q)
    return int(q[:-1]) / 1000 if q.endswith("m") else float(q)


def seconds(d):
    """A duration in the policy's syntax (30m, 5s, 1h, 1m30s)."""
    total, rest = 0, str(d)
    for num, unit in re.findall(r"(\d+)(ms|s|m|h|d)", rest):
        total += int(num) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    if not re.fullmatch(r"(\d+(ms|s|m|h|d))+", rest):
        raise ValueError(f"duration {d!r}")
    return total


def strip_comments(text):
    """The policy is JSON with // and /* */ comments; keep string contents intact."""
    out, i, in_str = [], 0, False
    while i < len(text):
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
            continue
        elif text.startswith("/*", i):
            i = text.index("*/", i) + 2
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def run_cordon(*argv):
    return subprocess.run([ARGS.cordon, *argv], capture_output=True, text=True, timeout=30)


def pod_spec(doc):
    kind = doc["kind"]
    if kind == "Job":
        return doc["spec"]["template"]["spec"]
    if kind == "PodTemplate":
        return doc["template"]["spec"]
    if kind == "SandboxTemplate":
        return doc["spec"]["podTemplate"]["spec"]
    raise AssertionError(f"unexpected kind {kind}")


def cordon_options(command):
    """cordon's own words of `cordon run OPTIONS -- PROGRAM`, as a dict and a list."""
    if command[:2] != ["cordon", "run"] or "--" not in command:
        raise AssertionError(f"not a `cordon run OPTIONS -- PROGRAM` command: {command}")
    words = command[2:command.index("--")]
    opts = {}
    i = 0
    while i < len(words):
        if not words[i].startswith("--") or i + 1 >= len(words):
            raise AssertionError(f"expected --option VALUE pairs, got {words[i:]}")
        opts[words[i]] = words[i + 1]
        i += 2
    return opts, words


class Deploy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        src = Path(ARGS.source)
        cls.deploy = src / "deploy"
        cls.docs = {}
        for name in MANIFESTS:
            path = cls.deploy / "kubernetes" / name
            docs = list(yaml.safe_load_all(path.read_text()))
            assert len(docs) == 1, f"{name}: one object expected"
            cls.docs[name] = docs[0]
        cls.profile = json.loads((cls.deploy / "seccomp" / "cordon.json").read_text())
        cls.policy = json.loads(strip_comments(run_cordon("policy", "default").stdout))
        cls.help = run_cordon("--help").stdout
        cls.seccomp_cc = (src / "launcher" / "sandbox" / "seccomp.cc").read_text()
        cls.doc_md = (src / "docs" / "kubernetes.md").read_text()
        cls.readme = (src / "README.md").read_text()

    def container(self, name):
        spec = pod_spec(self.docs[name])
        self.assertEqual(len(spec["containers"]), 1, name)
        return spec, spec["containers"][0]

    def test_every_yaml_under_deploy_parses_as_a_kubernetes_object(self):
        files = sorted(self.deploy.rglob("*.yaml")) + sorted(self.deploy.rglob("*.yml"))
        self.assertGreaterEqual(len(files), len(MANIFESTS))
        for f in files:
            for doc in yaml.safe_load_all(f.read_text()):
                for key in ("apiVersion", "kind", "metadata"):
                    self.assertIn(key, doc, f"{f}: {key}")
                self.assertTrue(doc["metadata"].get("name"), f"{f}: metadata.name")

    def test_kinds_and_api_versions(self):
        want = {"job.yaml": ("batch/v1", "Job"), "pod-template.yaml": ("v1", "PodTemplate"),
                "sandbox-template.yaml": ("extensions.agents.x-k8s.io/v1alpha1",
                                          "SandboxTemplate")}
        for name, (api, kind) in want.items():
            self.assertEqual((self.docs[name]["apiVersion"], self.docs[name]["kind"]),
                             (api, kind), name)

    def test_all_manifests_carry_the_same_pod(self):
        job = pod_spec(self.docs["job.yaml"])
        for name in MANIFESTS[1:]:
            self.assertEqual(pod_spec(self.docs[name]), job, f"{name} differs from job.yaml")

    def test_pod_settings_cordon_needs(self):
        for name in MANIFESTS:
            spec, c = self.container(name)
            self.assertIs(spec.get("hostUsers"), False, f"{name}: spec.hostUsers")
            self.assertEqual(spec.get("restartPolicy"), "Never", name)
            self.assertIs(spec.get("automountServiceAccountToken"), False, name)
            sc = c["securityContext"]
            self.assertEqual(sc.get("procMount"), "Unmasked", f"{name}: procMount")
            self.assertIs(sc.get("allowPrivilegeEscalation"), False, name)
            self.assertIs(sc.get("privileged", False), False, name)
            self.assertEqual(sc.get("capabilities"), {"drop": ["ALL"]},
                             f"{name}: capabilities: drop ALL and add nothing")
            self.assertIs(sc.get("runAsNonRoot"), True, name)
            self.assertNotEqual(sc.get("runAsUser", 0), 0, name)
            prof = sc.get("seccompProfile", {})
            self.assertEqual(prof.get("type"), "Localhost", f"{name}: seccompProfile.type")
            self.assertTrue((self.deploy / "seccomp" / prof.get("localhostProfile", "")).is_file(),
                            f"{name}: the profile it names is not in deploy/seccomp/")

    def test_volumes_hold_the_state_dir_and_the_workspace(self):
        for name in MANIFESTS:
            spec, c = self.container(name)
            opts, _ = cordon_options(c["command"])
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            vols = {v["name"]: v for v in spec["volumes"]}
            state = vols[mounts[opts["--state-dir"]]]
            self.assertEqual(state["emptyDir"].get("medium"), "Memory",
                             f"{name}: the state dir is a tmpfs emptyDir")
            self.assertIn("sizeLimit", state["emptyDir"], name)
            ws = vols[mounts[opts["--workspace"]]]
            self.assertTrue("emptyDir" in ws or "persistentVolumeClaim" in ws, name)

    def test_command_is_accepted_by_cordons_own_parser(self):
        for name in MANIFESTS:
            _, c = self.container(name)
            opts, words = cordon_options(c["command"])
            self.assertEqual(opts.get("--events-to"), "stdout", f"{name}: events to stdout")
            for needed in ("--state-dir", "--workspace", "--timeout", "--memory", "--cpus"):
                self.assertIn(needed, opts, name)
            self.assertTrue(c["command"][c["command"].index("--") + 1:], f"{name}: no program")
            # CLI11 refuses an unknown option or a missing value (exit 125) before --help.
            r = run_cordon("run", *words, "--help")
            self.assertEqual(r.returncode, 0, f"{name}: cordon run {words}: {r.stderr}")

    def test_resources_match_the_default_policy(self):
        proc = self.policy["process"]
        for name in MANIFESTS:
            spec, c = self.container(name)
            opts, _ = cordon_options(c["command"])
            self.assertEqual(opts["--memory"], proc["memory"], f"{name}: --memory")
            self.assertEqual(float(opts["--cpus"]), float(proc["cpus"]), f"{name}: --cpus")
            self.assertEqual(opts["--timeout"], proc["timeout"], f"{name}: --timeout")
            res = c["resources"]
            self.assertEqual(res["requests"]["memory"], res["limits"]["memory"],
                             f"{name}: memory request = limit (no overcommit of the sandbox)")
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            tmpfs = sum(kube_bytes(v["emptyDir"]["sizeLimit"]) for v in spec["volumes"]
                        if v.get("emptyDir", {}).get("medium") == "Memory")
            self.assertIn(opts["--state-dir"], mounts)
            # The sandbox's memory, every tmpfs volume (charged to the pod) and room for
            # cordon, cordon-netproxy and cordon-fs.
            need = cordon_bytes(opts["--memory"]) + tmpfs + (256 << 20)
            self.assertGreaterEqual(kube_bytes(res["limits"]["memory"]), need, name)
            self.assertGreaterEqual(kube_cpu(res["limits"]["cpu"]), float(opts["--cpus"]), name)

    def test_job_deadline_and_failure_policy_follow_cordons_exit_codes(self):
        job = self.docs["job.yaml"]["spec"]
        _, c = self.container("job.yaml")
        opts, _ = cordon_options(c["command"])
        grace = seconds(self.policy["process"]["kill_grace"])
        self.assertGreater(job["activeDeadlineSeconds"], seconds(opts["--timeout"]) + grace,
                           "the Job's deadline must leave cordon's timeout (exit 124) to fire")
        self.assertIn("backoffLimit", job)
        rules = job["podFailurePolicy"]["rules"]
        fail = [r for r in rules if r["action"] == "FailJob"]
        self.assertEqual(len(fail), 1)
        on = fail[0]["onExitCodes"]
        self.assertEqual(on["operator"], "In")
        self.assertEqual(on["containerName"], c["name"])
        self.assertEqual(sorted(on["values"]), [124, 125, 126, 127])
        for code in on["values"]:
            self.assertRegex(self.help, rf"\b{code}\b", f"exit code {code} is not documented")
        ignore = [r for r in rules if r["action"] == "Ignore"]
        self.assertEqual(ignore[0]["onPodConditions"], [{"type": "DisruptionTarget"}])

    def test_seccomp_profile_structure(self):
        p = self.profile
        self.assertIn(p["defaultAction"], ACTIONS)
        self.assertNotEqual(p["defaultAction"], "SCMP_ACT_ALLOW", "an unknown syscall must fail")
        self.assertIsInstance(p.get("defaultErrnoRet", 1), int)
        self.assertTrue(p["architectures"])
        for a in p["architectures"]:
            self.assertIn(a, ARCHES)
        seen = {}
        for entry in p["syscalls"]:
            self.assertIn(entry["action"], ACTIONS)
            self.assertTrue(entry["names"])
            self.assertTrue(entry.get("comment"), "every group says why")
            for n in entry["names"]:
                self.assertRegex(n, r"^[a-z_][a-z0-9_]*$")
                self.assertNotIn(n, seen, f"{n} is in two groups")
                seen[n] = entry["action"]
        self.__class__.actions = seen

    def test_seccomp_profile_names_real_syscalls(self):
        # libseccomp (which runc and crun load the profile with) resolves each name: a typo would
        # be skipped by the runtime, silently, and leave the syscall at the default action.
        path = ctypes.util.find_library("seccomp")
        self.assertIsNotNone(path, "libseccomp (libseccomp2) is needed to check the names")
        lib = ctypes.CDLL(path)
        lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
        lib.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
        arches = []
        for a in self.profile["architectures"]:
            token = lib.seccomp_arch_resolve_name(a[len("SCMP_ARCH_"):].lower().encode())
            self.assertNotEqual(token, 0, f"libseccomp does not know {a}")
            arches.append(token)
        for entry in self.profile["syscalls"]:
            for n in entry["names"]:
                nrs = [lib.seccomp_syscall_resolve_name_arch(t, n.encode()) for t in arches]
                self.assertTrue(any(nr >= 0 for nr in nrs), f"{n}: no such syscall")
        x86_64 = arches[self.profile["architectures"].index("SCMP_ARCH_X86_64")]
        for n in NEEDED_SYSCALLS:
            self.assertGreaterEqual(lib.seccomp_syscall_resolve_name_arch(x86_64, n.encode()), 0, n)

    def test_seccomp_profile_allows_what_cordon_calls(self):
        self.test_seccomp_profile_structure()
        for n in NEEDED_SYSCALLS:
            self.assertEqual(self.actions.get(n), "SCMP_ACT_ALLOW", f"{n} must be allowed")

    def test_seccomp_profile_refuses_what_cordon_refuses_its_programs(self):
        self.test_seccomp_profile_structure()
        body = re.search(r"default_denied_syscalls\(\) \{(.*?)\n\}", self.seccomp_cc, re.S)
        self.assertIsNotNone(body, "launcher/sandbox/seccomp.cc: default_denied_syscalls()")
        code = "\n".join(l.split("//")[0] for l in body.group(1).splitlines())
        denied = set(re.findall(r'"([a-z0-9_]+)"', code))
        self.assertIn("kexec_load", denied)
        for n in sorted(denied - CORDON_OWN_USE):
            self.assertEqual(self.actions.get(n), "SCMP_ACT_ERRNO", f"{n} must be refused")

    def test_docs_explain_the_recipe(self):
        for name in MANIFESTS + ["cordon.json", "cordon doctor", "hostUsers", "procMount",
                                 "gVisor", "Kata", "offline"]:
            self.assertIn(name, self.doc_md)
        self.assertIn("docs/kubernetes.md", self.readme)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--cordon", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
