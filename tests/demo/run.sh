#!/bin/sh
# The README's demo: tests/demo/agent.py, a prompt-injected "agent", runs under cordon's default
# policy in this checkout, then `cordon diff` shows the work it did, which waits in the session
# (copy-on-write: the checkout itself is untouched) until you apply or drop it.
set -eu
cd "$(dirname "$0")/../.."
cordon=${BUILD:-build}/launcher/cordon
if [ ! -x "$cordon" ]; then
  echo "tests/demo/run.sh: $cordon is not built; run: .ci/setup demo" >&2
  exit 2
fi

"$cordon" run -- python3 tests/demo/agent.py
echo
echo "== what the agent changed: cordon diff last =="
"$cordon" diff last
echo
echo "Nothing above has touched this checkout yet. Apply the agent's work: $cordon commit last"
echo "or drop it: $cordon discard last (the log stays: $cordon log last)"
