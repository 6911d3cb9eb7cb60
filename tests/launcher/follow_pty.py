#!/usr/bin/env python3
# follow_pty.py CORDON WORKSPACE MODE [no-color]: starts a session in the background, follows it with
# `cordon watch last` on a pseudo-terminal while it runs, and prints what the terminal showed
# after a line "---", then "watch-exit N" and "started-live 0|1". Bounded: 60 s in all.
import os, pty, select, subprocess, sys, time

cordon, ws, mode = sys.argv[1], sys.argv[2], sys.argv[3]
no_color = len(sys.argv) > 4
env = dict(os.environ, CORDON_TEST_PASSED="x")
state = os.environ["CORDON_STATE_DIR"] + "/sessions"
def sessions():
    return len(os.listdir(state)) if os.path.isdir(state) else 0
before = sessions()
# A decision worth colouring early (env.passed, allow), then time to be followed, then the end.
run = subprocess.Popen([cordon, "run", "--mode", mode, "-w", ws, "--env-pass", "CORDON_TEST_PASSED",
                        "--", "sh", "-c", "sleep 3; exit 3"],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.time() + 60
while time.time() < deadline and sessions() <= before:
    time.sleep(0.05)
time.sleep(0.3)  # session.start written
wenv = dict(os.environ)
wenv.pop("NO_COLOR", None)
if no_color:
    wenv["NO_COLOR"] = "1"
pid, fd = pty.fork()
if pid == 0:
    os.execve(cordon, [cordon, "watch", "last"], wenv)
started_live = run.poll() is None
out = b""
while time.time() < deadline:
    r, _, _ = select.select([fd], [], [], 0.5)
    if r:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        out += chunk
_, status = os.waitpid(pid, 0)
run.wait(timeout=max(1, deadline - time.time()))
sys.stdout.write("---\n" + out.decode("utf-8", "replace") + "\n")
print("watch-exit", os.waitstatus_to_exitcode(status))
print("started-live", int(started_live))
print("run-exit", run.returncode)
