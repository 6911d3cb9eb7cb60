#!/usr/bin/env python3
"""A decider that misbehaves, for the fail-closed tests: `silent` reads questions and never
answers, `crash` exits on the first question, `garbage` answers it with a line that is not a
reply, `slow-then-allow SECONDS` answers allow after a delay. Speaks on stdin/stdout."""
import sys
import time

mode = sys.argv[1]
for line in sys.stdin:
    if mode == "crash":
        sys.exit(3)
    if mode == "garbage":
        sys.stdout.write("this is not json {\n")
        sys.stdout.flush()
    if mode == "slow-then-allow":
        time.sleep(float(sys.argv[2]))
        import json
        q = json.loads(line)
        sys.stdout.write(json.dumps({"id": q["id"], "decision": "allow"}) + "\n")
        sys.stdout.flush()
# silent: keeps reading until cordon closes the channel
