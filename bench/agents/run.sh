#!/usr/bin/env bash
# Wall time of a one-tool-call agent session under `cordon run --agent` against the same session
# unsandboxed (target: <= 1.1x). Each agent from npm (.ci/setup puts them in /opt/cordon-agents)
# answers one prompt: the scripted model API (tests/agents/mock_model_api.py) asks for one shell
# tool call, then for the final answer. RUNS interleaved pairs; medians and their ratio printed.
# Everything runs in a network namespace of this script's own with only loopback up: the model
# API listens there, and nothing an agent tries can leave the machine. Its mount namespace's
# /etc/hosts names the API hosts 127.0.0.1, so both sides reach the model API by the same URL.
# Both sides run as the same unprivileged user with the same home, settings and variables (the
# unsandboxed side also gets the preset's telemetry switches).
# Usage: sudo bench/agents/run.sh [BUILD_DIR]
#   AGENTS="claude-code codex gemini opencode" (default all) RUNS=10 CORDON_AGENTS_PREFIX=DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${CORDON_BENCH_NETNS:-}" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bench/agents: run as root (it makes a network namespace and runs the agents as a user)" >&2
    exit 2
  fi
  exec env CORDON_BENCH_NETNS=1 unshare --net --mount -- "$0" "$@"
fi
ip link set lo up

BUILD=$(realpath "${1:-build}")
CORDON="$BUILD/launcher/cordon"
PREFIX=${CORDON_AGENTS_PREFIX:-/opt/cordon-agents}
RUNS=${RUNS:-10}
AGENTS=${AGENTS:-claude-code codex gemini opencode}
USER_ID=${BENCH_UID:-4242}
CORDON_FLAGS=${CORDON_FLAGS:-}  # extra `cordon run` flags, e.g. "--cpus 0" to compare
for tool in python3 openssl setpriv; do
  command -v "$tool" >/dev/null || { echo "bench/agents: $tool missing" >&2; exit 2; }
done
[ -x "$CORDON" ] || { echo "bench/agents: $CORDON not built" >&2; exit 2; }

D=$(mktemp -d /tmp/cordon-bench-agents.XXXXXX)
chmod 755 "$D"
MOCK_PID=
cleanup() {
  [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT

HOSTS="api.anthropic.com api.openai.com generativelanguage.googleapis.com"
{ cat /etc/hosts; echo "127.0.0.1 $HOSTS"; } >"$D/hosts"
mount --bind "$D/hosts" /etc/hosts

# A throwaway CA and one certificate for every API name.
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
(cd "$D" &&
  echo "subjectAltName=DNS:${HOSTS// /,DNS:}" >san.ext &&
  openssl req -x509 $ec -keyout ca.key -out ca.crt -days 2 -subj '/CN=cordon bench CA' 2>/dev/null &&
  openssl req $ec -keyout srv.key -out srv.csr -subj '/CN=api.anthropic.com' 2>/dev/null &&
  openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt -days 2 \
    -extfile san.ext 2>/dev/null && chmod 644 ca.crt)

mkfifo "$D/mock.in"
COMMAND='echo cordon-e2e-wrote > agent-note.txt; cat ~/.ssh/id_rsa; echo key-rc=$?; curl -sS -m 20 http://198.51.100.7/docs; echo fetch-rc=$?'
python3 tests/agents/mock_model_api.py cert="$D/srv.crt" key="$D/srv.key" log=/dev/null \
  "command=$COMMAND" "final=cordon-bench: done" <"$D/mock.in" >"$D/mock.port" &
MOCK_PID=$!
exec 3>"$D/mock.in"  # held open: the mock serves until it closes
for _ in $(seq 50); do [ -s "$D/mock.port" ] && break; sleep 0.1; done
PORT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["port"])' "$D/mock.port")

# Per agent: its program, API name, settings writer, variables and arguments (as in
# tests/agents/agents_test.cc).
setup_agent() {  # NAME HOME BASE -> sets PROGRAM ARGS ENVS
  local name=$1 home=$2 base=$3
  case "$name" in
    claude-code)
      PROGRAM=claude
      ENVS=(ANTHROPIC_BASE_URL="$base" ANTHROPIC_API_KEY=sk-bench NODE_EXTRA_CA_CERTS="$D/ca.crt")
      ARGS=(-p "Run the tool call." --allowedTools Bash) ;;
    codex)
      PROGRAM=codex
      mkdir -p "$home/.codex"
      printf 'model = "mock-model"\nmodel_provider = "mock"\n\n[model_providers.mock]\nname = "mock"\nbase_url = "%s/v1"\nenv_key = "OPENAI_API_KEY"\nwire_api = "responses"\n' \
        "$base" >"$home/.codex/config.toml"
      # What the preset's /etc/codex/config.toml gives the sandboxed side, for the plain one.
      [ "$home" = "$A/plain-home" ] && printf '\n[analytics]\nenabled = false\n[features]\nplugins = false\nremote_plugin = false\nplugin_sharing = false\napps = false\n' \
        >>"$home/.codex/config.toml" && sed -i '1i check_for_update_on_startup = false' "$home/.codex/config.toml"
      ENVS=(OPENAI_API_KEY=sk-bench CODEX_CA_CERTIFICATE="$D/ca.crt")
      ARGS=(exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "Run the tool call.") ;;
    gemini)
      PROGRAM=gemini
      mkdir -p "$home/.gemini"
      echo '{"security": {"auth": {"selectedType": "gemini-api-key"}}}' >"$home/.gemini/settings.json"
      ENVS=(GOOGLE_GEMINI_BASE_URL="$base" GEMINI_API_KEY=sk-bench GEMINI_CLI_TRUST_WORKSPACE=true
        NODE_EXTRA_CA_CERTS="$D/ca.crt")
      ARGS=(-p "Run the tool call." --yolo) ;;
    opencode)
      PROGRAM=opencode
      mkdir -p "$home/.config/opencode"
      cat >"$home/.config/opencode/opencode.json" <<EOF
{"model": "mock/mock-model",
 "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "mock",
   "options": {"baseURL": "$base/v1", "apiKey": "{env:OPENAI_API_KEY}"},
   "models": {"mock-model": {"name": "mock"}}}},
 "permission": {"bash": "allow", "edit": "allow", "external_directory": "allow"}}
EOF
      ENVS=(OPENAI_API_KEY=sk-bench NODE_EXTRA_CA_CERTS="$D/ca.crt")
      ARGS=(run "Run the tool call.") ;;
    *) echo "bench/agents: unknown agent $name" >&2; exit 2 ;;
  esac
}

# The preset's own variables (telemetry, error reports, updates off), for the unsandboxed side.
preset_env() {
  "$CORDON" policy explain --agent "$1" |
    sed -n 's/^  environment: sets \(.*\) (telemetry.*/\1/p' | tr -d ',' | tr ' ' '\n' | grep =
}

printf '%-12s %12s %12s %8s\n' agent "plain s" "cordon s" ratio
for agent in $AGENTS; do
  A="$D/$agent"
  mkdir -p "$A/plain-home" "$A/cordon-home" "$A/ws" "$A/state"
  case "$agent" in
    claude-code) HOST=api.anthropic.com ;;
    gemini) HOST=generativelanguage.googleapis.com ;;
    *) HOST=api.openai.com ;;
  esac
  setup_agent "$agent" "$A/plain-home" "https://$HOST:$PORT"
  PLAIN_ENVS=("${ENVS[@]}")
  setup_agent "$agent" "$A/cordon-home" "https://$HOST:$PORT"
  CORDON_ENVS=("${ENVS[@]}")
  for h in plain-home cordon-home; do
    mkdir -p "$A/$h/.ssh" && echo "not a key" >"$A/$h/.ssh/id_rsa"
  done
  chown -R "$USER_ID:$USER_ID" "$A"
  cat >"$A/policy.json" <<EOF
{"network": {"allow": ["$HOST:$PORT"], "resolve": {"$HOST": "127.0.0.1"}},
 "filesystem": {"read": ["$D/ca.crt"]}}
EOF
  mapfile -t PRESET_ENVS < <(preset_env "$agent")
  # The key in cordon's environment, where the preset passes it from; the rest as flags.
  SETS=() KEYS=()
  for kv in "${CORDON_ENVS[@]}"; do
    case "${kv%%=*}" in
      *API_KEY*) KEYS+=("$kv") ;;
      *) SETS+=(--env-set "$kv") ;;
    esac
  done
  P="$PREFIX/bin:/usr/local/bin:/usr/bin:/bin"
  printf '%s\0' setpriv --reuid "$USER_ID" --regid "$USER_ID" --clear-groups env -i PATH="$P" \
    HOME="$A/plain-home" LANG=C.UTF-8 TERM=dumb "${PRESET_ENVS[@]}" "${PLAIN_ENVS[@]}" \
    "$PROGRAM" "${ARGS[@]}" >"$A/plain.argv"
  printf '%s\0' env -i PATH="$P" HOME="$A/cordon-home" LANG=C.UTF-8 TERM=dumb \
    CORDON_STATE_DIR="$A/state" "${KEYS[@]}" "$CORDON" run -q --agent "$agent" -w "$A/ws" $CORDON_FLAGS \
    --policy "$A/policy.json" "${SETS[@]}" -- "$PROGRAM" "${ARGS[@]}" >"$A/cordon.argv"
  python3 - "$RUNS" "$agent" "$A" <<'PY'
import statistics, subprocess, sys, time
runs, agent, a = int(sys.argv[1]), sys.argv[2], sys.argv[3]
argv = {k: open(f"{a}/{k}.argv").read().split("\0")[:-1] for k in ("plain", "cordon")}
def once(kind):
    t = time.monotonic()
    p = subprocess.run(argv[kind], cwd=f"{a}/ws", capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t
    if p.returncode != 0 or "cordon-bench: done" not in p.stdout:
        sys.exit(f"bench/agents: {agent} {kind} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return took
once("plain"), once("cordon")  # warm the page cache (the agents are 100-400 MB binaries)
times = {"plain": [], "cordon": []}
for _ in range(runs):
    for kind in ("plain", "cordon"):
        times[kind].append(once(kind))
p, c = statistics.median(times["plain"]), statistics.median(times["cordon"])
print(f"{agent:12} {p:12.3f} {c:12.3f} {c / p:7.2f}x", flush=True)
PY
done
