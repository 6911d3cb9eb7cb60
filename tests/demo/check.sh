#!/usr/bin/env bash
# tests/demo/check.sh LOG: checks that LOG (the output of the demo agent under `cordon run`, then
# `cordon diff last`) shows every refusal, the agent's work, and that diff. Prints what is
# missing or got through; exit 1 then.
set -euo pipefail
log=$1
want=(
  "refused  read /etc/shadow"
  "refused  read tests/demo/project/.env"
  "refused  resolve evil.example"
  "refused  connect 198.51.100.1:443"
  "refused  write /usr/bin/cordon-was-here"
  "refused  plant tests/demo/project/.envrc"
  "done     edit greet.py"
  "done     delete debug.log"
  "done     write NOTES.md"
  "done     run greet.py: it says Hello, world!"
  "added tests/demo/project/NOTES.md"
  "deleted tests/demo/project/debug.log"
  "modified tests/demo/project/greet.py"
  '+    return "Hello, " + name + "!"'
)
status=0
for w in "${want[@]}"; do
  grep -qF -- "$w" "$log" || { echo "the demo did not print: $w"; status=1; }
done
if grep -qE 'ALLOWED  (read|write|connect|resolve|plant)|FAILED  ' "$log"; then
  echo "the demo got through or failed: $(grep -E 'ALLOWED|FAILED' "$log" | head -3)"
  status=1
fi
exit "$status"
