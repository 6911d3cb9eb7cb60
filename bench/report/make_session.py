#!/usr/bin/env python3
"""make_session.py SESSION_DIR N: replaces SESSION_DIR/events.jsonl with N events of an agent-like
mix (processes, file opens, DNS, connections, HTTP requests, refusals), as the four writers write
them, keeping the session's own session.start and session.end."""
import calendar
import json
import random
import sys
import time

session_dir, total = sys.argv[1], int(sys.argv[2])
random.seed(7)
lines = [json.loads(l) for l in open(session_dir + "/events.jsonl") if l.strip()]
start = next(e for e in lines if e["kind"] == "session.start")
end = next(e for e in lines if e["kind"] == "session.end")
sid = start["session"]
t0 = calendar.timegm(time.strptime(start["ts"][:19], "%Y-%m-%dT%H:%M:%S")) + 0.01
hosts = ["api.anthropic.com", "pypi.org", "files.pythonhosted.org", "github.com",
         "registry.npmjs.org", "objects.githubusercontent.com"]


def ts(t):
    whole = int(t)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + ".%06dZ" % int((t - whole) * 1e6)


def ev(t, source, kind, **f):
    f.update(ts=ts(t), session=sid, source=source, kind=kind)
    return f


out = [start]
procs = [(2, 1, "/usr/bin/python3.11", ["python3", "agent.py", "--task", "fix the failing tests"])]
pid, port, t = 2, 40000, t0 + 0.05
cred = lambda p: {"pid": 10000 + p, "uid": 1000, "gid": 1000}
out.append(ev(t, "shim", "proc.start", pid=2, ppid=1, exe=procs[0][2], argv=procs[0][3], argc=4,
              cred=cred(2)))
while len(out) < total - 1:
    t += random.uniform(0.001, 0.01)
    p, pp, exe, argv = random.choice(procs)
    r = random.random()
    who = dict(pid=p, ppid=pp, exe=exe, argv=argv, argc=len(argv), cred=cred(p))
    if r < 0.03 and len(procs) < 60:
        pid += 1
        cmd = random.choice([["git", "status", "--short"], ["pytest", "-q", "tests/"],
                             ["rg", "-n", "TODO", "src"], ["npm", "install"]])
        out.append(ev(t, "shim", "proc.exec", path="/usr/bin/" + cmd[0], target_argv=cmd,
                      via="execve", **dict(who, pid=pid, ppid=p)))
        procs.append((pid, p, "/usr/bin/" + cmd[0], cmd))
        out.append(ev(t + 0.002, "shim", "proc.start", pid=pid, ppid=p, exe="/usr/bin/" + cmd[0],
                      argv=cmd, argc=len(cmd), cred=cred(pid)))
    elif r < 0.45:
        path = "src/module_%d/file_%d.py" % (random.randrange(40), random.randrange(500))
        out.append(ev(t, "shim", "fs.open", path=path, flags=0, **who))
    elif r < 0.55:
        h = random.choice(hosts)
        out.append(ev(t, "netproxy", "net.dns", name=h, type="A", rcode="NOERROR",
                      decision="allow", rule="network.allow[0]", answers=["203.0.113.10"]))
    elif r < 0.9:
        port += 1
        h = random.choice(hosts)
        client = "127.0.0.1:%d" % port
        out.append(ev(t, "shim", "net.connect", local=client, remote="203.0.113.10:443",
                      errno=115, error="Operation now in progress", **who))
        out.append(ev(t + 0.02, "netproxy", "net.http", method="GET", name=h, port=443,
                      url="https://%s/simple/pkg-%d/" % (h, random.randrange(900)), status=200,
                      request_bytes=412, response_bytes=random.randrange(20000), decision="allow",
                      rule="network.allow[0]", address="203.0.113.10", client=client,
                      mode="transparent", duration_ms=40))
        out.append(ev(t + 0.03, "netproxy", "net.connect", name=h, address="203.0.113.10",
                      port=443, mode="transparent", decision="allow", rule="network.allow[0]",
                      bytes_out=900, bytes_in=24000, duration_ms=55, end="closed", sni=h,
                      client=client))
    elif r < 0.95:
        out.append(ev(t, "fusefs", "fs.refused", path=".env", op="lookup", pid=10000 + p,
                      exe=exe, rule="filesystem.deny[11]", decision="deny"))
    else:
        port += 1
        client = "127.0.0.1:%d" % port
        out.append(ev(t, "netproxy", "net.refused", name="paste.example", port=443,
                      mode="transparent", decision="deny", rule="network.allow (no match)",
                      reason="cordon: paste.example:443 is not in network.allow", client=client))
out = out[: total - 1]
out.append(dict(end, ts=ts(t + 0.1)))
with open(session_dir + "/events.jsonl", "w") as f:
    for e in out:
        f.write(json.dumps(e, sort_keys=True, separators=(",", ":")) + "\n")
print("%d events, %d bytes of events.jsonl" % (len(out), sum(len(json.dumps(e)) + 1 for e in out)))
