#!/usr/bin/env python3
# ask_pty.py KEYS CMD...: runs CMD (a `cordon run --ask ...`) on a new pseudo-terminal, as its
# controlling terminal, and answers each question cordon prints there with the next key of KEYS
# ("." = no answer: the question times out). Prints what the terminal showed, then "prompts N" and
# "exit N". Extra questions beyond KEYS are left unanswered. Bounded: 90 s in all. ASK_PTY_WAIT:
# seconds between a question's appearing and its answer (default 0.1).
import os, pty, select, sys, time

keys, cmd = sys.argv[1], sys.argv[2:]
PROMPT = b"cordon: the sandbox asks to "
WAIT = float(os.environ.get("ASK_PTY_WAIT", "0.1"))
pid, fd = pty.fork()
if pid == 0:
    os.execvp(cmd[0], cmd)
out = b""
seen = 0
deadline = time.time() + 90
while time.time() < deadline:
    r, _, _ = select.select([fd], [], [], 0.2)
    if r:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: every slave closed
            break
        if not chunk:
            break
        out += chunk
    # A question is answered once its whole prompt (the line of choices) is on the terminal.
    while out.count(PROMPT) > seen and out.rfind(b" s, then denied") > out.rfind(PROMPT):
        if seen < len(keys) and keys[seen] != ".":
            # Keep reading meanwhile: what reaches the terminal while the question is open is
            # part of the transcript.
            until = time.time() + WAIT
            while time.time() < until:
                r, _, _ = select.select([fd], [], [], max(0.0, until - time.time()))
                if r:
                    try:
                        chunk = os.read(fd, 65536)
                    except OSError:
                        break
                    out += chunk
            out += b"<answered>"
            os.write(fd, keys[seen].encode())
        seen += 1
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode("utf-8", "replace").replace("\r", "") + "\n")
print("prompts", seen)
print("exit", os.waitstatus_to_exitcode(status))
