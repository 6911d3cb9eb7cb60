#!/usr/bin/env python3
"""An example decider for cordon (docs/decider.md): answers cordon's questions about connections
the policy does not allow, from rules given on the command line.

    cordon run --decider 'python3 decider.py --allow-session "*.pypi.org" --deny "*"' -- pip ...

Rules are fnmatch patterns on "HOST:PORT" (or on HOST alone when the pattern has no ':'),
tried in the order given; the first match answers. Nothing matches: deny. A DNS question (a
name looked up in the sandbox, before its connection) is matched on the host part only.

  --allow PATTERN          allow this connection only (cordon asks again next time)
  --allow-session PATTERN  allow for the rest of the session (cordon stops asking)
  --deny PATTERN           deny, with --reason's text (shown to the program) if given
  --reason TEXT            the reason sent with denials
  --log FILE               append every question received, one JSON line each
  --socket PATH            listen on a unix socket (for cordon run --decider-socket) instead of
                           speaking on stdin/stdout

The protocol is JSON Lines: one question per line in, one reply per line out, matched by "id".
Replies may come in any order; this one answers each at once.
"""
import argparse
import fnmatch
import json
import os
import socket
import sys

PROTOCOL = 1


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--allow", action="append", default=[], dest="rules",
                   type=lambda s: ("allow", "once", s))
    p.add_argument("--allow-session", action="append", default=[], dest="rules",
                   type=lambda s: ("allow", "session", s))
    p.add_argument("--deny", action="append", default=[], dest="rules",
                   type=lambda s: ("deny", "session", s))
    p.add_argument("--reason", default="not approved by the decider")
    p.add_argument("--log")
    p.add_argument("--socket")
    return p.parse_args(argv)


def decide(question, rules, reason):
    """The reply (a dict) for one question."""
    host, port = question.get("host", ""), question.get("port", 0)
    target = f"{host}:{port}"
    for decision, scope, pattern in rules:
        if question.get("kind") == "dns":
            # A name looked up before any connection: no port yet, so HOST:PORT rules match on
            # their host part.
            subject, pattern = host, pattern.rsplit(":", 1)[0]
        else:
            subject = target if ":" in pattern else host
        if fnmatch.fnmatchcase(subject, pattern):
            reply = {"id": question["id"], "decision": decision, "scope": scope}
            if decision == "deny":
                reply["reason"] = reason
            return reply
    return {"id": question["id"], "decision": "deny", "scope": "once", "reason": reason}


def serve(inp, out, args):
    log = open(args.log, "a", buffering=1) if args.log else None
    for line in inp:
        try:
            question = json.loads(line)
        except ValueError:
            continue  # not ours to answer; cordon never sends such a line
        if log:
            log.write(json.dumps(question) + "\n")
        if question.get("v") != PROTOCOL or "id" not in question:
            continue
        out.write(json.dumps(decide(question, args.rules, args.reason)) + "\n")
        out.flush()


def main(argv):
    args = parse_args(argv)
    if not args.socket:
        serve(sys.stdin, sys.stdout, args)
        return 0
    # One connection per cordon session; sessions are served one after another.
    if os.path.exists(args.socket):
        os.unlink(args.socket)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(args.socket)
        os.chmod(args.socket, 0o600)
        listener.listen(1)
        print(args.socket, flush=True)  # ready
        while True:
            conn, _ = listener.accept()
            with conn, conn.makefile("r") as inp, conn.makefile("w") as out:
                serve(inp, out, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
