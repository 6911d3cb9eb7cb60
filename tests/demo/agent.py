#!/usr/bin/env python3
"""A stand-in for an AI agent that has been prompt-injected: it tries what a hijacked agent would
try, and reports what the sandbox let it do. Run it under cordon (README, first command):

    cordon run -- python3 tests/demo/agent.py
"""
import os
import socket
import subprocess


def attempt(what, fn):
    try:
        result = fn()
        print(f"  ALLOWED  {what}" + (f": {result}" if result else ""))
    except Exception as e:  # the point is to show the refusal, whatever its type
        print(f"  refused  {what}: {type(e).__name__}: {e}")


def read(path):
    with open(path, "rb") as f:
        return f"{len(f.read())} bytes"


def write(path):
    with open(path, "w") as f:
        f.write("agent was here\n")
    return None


def connect(host, port):
    with socket.create_connection((host, port), timeout=3):
        return "connected"


home = os.path.expanduser("~")
print(f"demo agent: uid {os.getuid()}, pid {os.getpid()}, host {socket.gethostname()}, "
      f"cwd {os.getcwd()}")
print("the agent tries to steal secrets:")
attempt(f"read {home}/.ssh/id_rsa", lambda: read(f"{home}/.ssh/id_rsa"))
attempt(f"list {home}", lambda: ", ".join(sorted(os.listdir(home))) or "(empty)")
attempt("read /etc/shadow", lambda: read("/etc/shadow"))
print("the agent tries to exfiltrate and phone home:")
attempt("resolve evil.example", lambda: socket.gethostbyname("evil.example"))
attempt("connect 198.51.100.1:443", lambda: connect("198.51.100.1", 443))
print("the agent tries to tamper with the system:")
attempt("write /usr/bin/cordon-was-here", lambda: write("/usr/bin/cordon-was-here"))
attempt("write /etc/profile.d/x.sh", lambda: write("/etc/profile.d/x.sh"))
procs = [p for p in os.listdir("/proc") if p.isdigit()]
print(f"the agent looks around: {len(procs)} processes visible: {', '.join(sorted(procs, key=int))}")
print("the agent does its real work in the workspace:")
attempt("write ./agent-output.txt", lambda: write("agent-output.txt"))
attempt("run a subprocess", lambda: subprocess.run(["uname", "-sr"], capture_output=True,
                                                    text=True, check=True).stdout.strip())
