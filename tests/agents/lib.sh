# Shared by tests/agents/<client>.sh: each runs one real coding agent, headless, for two turns of
# one session against `deltaserve serve` on the bundled model, and checks the server's request
# log. Sourced after the script sets CLIENT (its name in messages); $1 is the deltaserve CLI.
#
# What every script gets from here:
#   - skip / fail: exit 77 (ctest's SKIP_RETURN_CODE) when a dependency is missing, except under
#     CI=true, where a missing dependency fails (tests/support/missing_dependency.h's rule);
#   - a network namespace with only loopback, where the machine allows one (root, or user
#     namespaces): the clients are configured to send nothing but their API requests, and this
#     makes sure of it (DS_AGENTS_NETNS=0 turns it off);
#   - start_server: `deltaserve serve` on a free loopback port with --request-log;
#   - a scratch folder: $PROJECT (the agent's working folder, a small Python file in it) and
#     $SCRATCH_HOME (HOME and XDG dirs: the client's config, sessions and caches, nothing of the
#     user's), and base_env, the whole environment a client runs with (env -i);
#   - run_turn N ...: the client's Nth invocation, bounded by a timeout, in its own process
#     group (killed afterwards, so nothing it left behind outlives the turn);
#   - check_request_log: turn 2's main request read >= 90% of its prompt from the prefix cache;
#     prints the first prompt's tokens, both TTFTs and turn 2's cached tokens.
# Knobs: DS_AGENTS_MAX_OUTPUT_TOKENS (the output cap opencode and Qwen Code ask for, 512 by
# default; Claude Code keeps its own 32,000 unless this is set, and Codex asks for none: both fail
# a turn whose reply the cap cuts), DS_AGENTS_TURN_TIMEOUT_S (240), DS_AGENTS_SERVE_ARGS (extra serve flags), DS_AGENTS_KEEP=1
# (keep the scratch folder), DS_AGENTS_LEAN=1 (a smoke run: each client with a one-line system
# prompt and no tools, where it has switches for that, to fit a short context).
set -uo pipefail

AGENTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$AGENTS_DIR/../.." && pwd)
NODE_BIN=$AGENTS_DIR/node/node_modules/.bin
CLI=${1:-}
MODEL=deltacoder
TURN_TIMEOUT=${DS_AGENTS_TURN_TIMEOUT_S:-240}
LEAN=${DS_AGENTS_LEAN:-0}
LEAN_SYSTEM="You are a coding assistant. Answer in one short paragraph."
PROMPT1="Read main.py and say in one sentence what greet() does."
PROMPT2="Now suggest a docstring for greet()."

in_ci() { [[ ${CI:-} == true || ${CI:-} == 1 ]]; }
skip() {
  echo "SKIP ($CLIENT): $*"
  if in_ci; then
    echo "CI=true: a missing dependency is a failure"
    exit 1
  fi
  exit 77
}

# Loopback only: re-run this script in a new network namespace (lo up, nothing else), the server
# and the client inside it. Root needs only unshare -n; others a user namespace (-r).
if [[ ${DS_AGENTS_NETNS:-1} != 0 && -z ${DS_AGENTS_IN_NETNS:-} ]]; then
  ip_cmd=$(command -v ip || echo /usr/sbin/ip)
  for flags in -n -rn; do
    if unshare $flags "$ip_cmd" link set lo up 2>/dev/null; then
      export DS_AGENTS_IN_NETNS="unshare $flags"
      exec unshare $flags bash -c '"$0" link set lo up && exec bash "$@"' "$ip_cmd" "$0" "$@"
    fi
  done
  export DS_AGENTS_IN_NETNS=none
fi

[[ -n $CLI && -x $CLI ]] || skip "deltaserve is not built (got '${CLI}'; run scripts/build)"
command -v node >/dev/null 2>&1 || skip "node is not installed (run scripts/setup)"
command -v curl >/dev/null 2>&1 || skip "curl is not installed (run scripts/setup)"
command -v python3 >/dev/null 2>&1 || skip "python3 is not installed (run scripts/setup)"
# require_client BIN: the client's command from tests/agents/node (scripts/setup installs it).
require_client() {
  [[ -x $NODE_BIN/$1 ]] || skip "$NODE_BIN/$1 is missing (run scripts/setup)"
  "$NODE_BIN/$1" --version >/dev/null 2>&1 || skip "$NODE_BIN/$1 --version fails: its native binary did not install (run scripts/setup)"
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ds-agents-XXXXXX")
PROJECT=$WORK/project
SCRATCH_HOME=$WORK/home
LOG=$WORK/requests.jsonl
SERVER_PID=""
mkdir -p "$PROJECT" "$SCRATCH_HOME"/{.config,.cache,.local/share,.local/state} "$WORK/tmp"
cat >"$PROJECT/main.py" <<'PY'
def greet(name):
    return "Hello, " + name + "!"


if __name__ == "__main__":
    print(greet("world"))
PY

cleanup() {
  if [[ -n $SERVER_PID ]]; then
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$SERVER_PID" 2>/dev/null
    : >"$WORK/server.pid"
  fi
  if [[ ${DS_AGENTS_KEEP:-0} == 1 ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT
# Should this script be killed outright (ctest's timeout), a watcher ends what it started: the
# server and the running client's process group.
(
  trap '' TERM INT
  while kill -0 $$ 2>/dev/null; do sleep 2; done
  [[ -s $WORK/client.pgid ]] && kill -KILL -- "-$(cat "$WORK/client.pgid")" 2>/dev/null
  [[ -s $WORK/server.pid ]] && kill -KILL "$(cat "$WORK/server.pid")" 2>/dev/null
  [[ ${DS_AGENTS_KEEP:-0} == 1 ]] || rm -rf "$WORK"
) </dev/null >/dev/null 2>&1 &

fail() {
  echo "FAIL ($CLIENT): $*"
  for f in "$WORK"/turn*.out "$WORK"/turn*.err; do
    [[ -s $f ]] || continue
    echo "--- ${f#"$WORK"/} (last 40 lines) ---"
    tail -n 40 "$f" | cut -c1-2000
  done
  if [[ -s $LOG ]]; then echo "--- request log ---"; cat "$LOG"; fi
  if [[ -s $WORK/serve.log ]]; then echo "--- server log (last 40 lines) ---"; tail -n 40 "$WORK/serve.log"; fi
  exit 1
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The bundled model under its served name; --request-log is what check_request_log reads.
start_server() {
  PORT=$(free_port)
  BASE_URL=http://127.0.0.1:$PORT
  : >"$LOG"
  # shellcheck disable=SC2086  # DS_AGENTS_SERVE_ARGS is a list of flags
  "$CLI" serve --model "$ROOT/models/deltacoder" --served-model-name "$MODEL" --host 127.0.0.1 --port "$PORT" \
    --threads "${DS_AGENTS_THREADS:-2}" --max-num-seqs 4 --request-log "$LOG" ${DS_AGENTS_SERVE_ARGS:-} \
    >"$WORK/serve.log" 2>&1 &
  SERVER_PID=$!
  echo "$SERVER_PID" >"$WORK/server.pid"
  for _ in $(seq 1 240); do
    curl -sf "$BASE_URL/health" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.25
  done
  fail "deltaserve serve did not come up on $BASE_URL"
}

# The environment every client starts from (run with env -i): no variable of the user's or of
# ctest's reaches it but PATH's node and system tools.
base_env() {
  local node_dir
  node_dir=$(dirname "$(command -v node)")
  CLIENT_ENV=(
    "PATH=$node_dir:/usr/local/bin:/usr/bin:/bin"
    "HOME=$SCRATCH_HOME"
    "XDG_CONFIG_HOME=$SCRATCH_HOME/.config" "XDG_CACHE_HOME=$SCRATCH_HOME/.cache"
    "XDG_DATA_HOME=$SCRATCH_HOME/.local/share" "XDG_STATE_HOME=$SCRATCH_HOME/.local/state"
    "TMPDIR=$WORK/tmp" "TERM=dumb" "NO_COLOR=1" "LANG=C.UTF-8" "USER=${USER:-root}" "SHELL=/bin/bash"
  )
}

log_lines() { wc -l <"$LOG" | tr -d ' '; }
declare -a TURN_FIRST_LINE
# run_turn N COMMAND...: the client's Nth invocation in $PROJECT with CLIENT_ENV; its stdout and
# stderr in $WORK/turnN.out and .err. Fails on a timeout or a non-zero exit.
run_turn() {
  local n=$1
  shift
  TURN_FIRST_LINE[n]=$(($(log_lines) + 1))
  local t0=$SECONDS
  (cd "$PROJECT" && exec env -i "${CLIENT_ENV[@]}" setsid timeout -k 10 "$TURN_TIMEOUT" "$@") \
    </dev/null >"$WORK/turn$n.out" 2>"$WORK/turn$n.err" &
  local pid=$!
  echo "$pid" >"$WORK/client.pgid"
  wait "$pid"
  local rc=$?
  kill -KILL -- "-$pid" 2>/dev/null  # whatever the client left running in its session
  : >"$WORK/client.pgid"
  # The server writes a request's line as it ends; the client may have exited a moment before.
  local prev=-1 cur
  for _ in $(seq 1 20); do
    cur=$(log_lines)
    [[ $cur == "$prev" ]] && break
    prev=$cur
    sleep 0.25
  done
  echo "$CLIENT turn $n: exit $rc after $((SECONDS - t0)) s, $(($(log_lines) + 1 - TURN_FIRST_LINE[n])) requests"
  ((rc == 124 || rc == 137)) && fail "turn $n timed out after ${TURN_TIMEOUT} s"
  # The client's own verdict on its output (each script defines check_turn N), first: it names
  # the API error that usually is why a client exits non-zero.
  check_turn "$n"
  ((rc == 0)) || fail "turn $n exited $rc"
}

# refute N PATTERN WHAT: fail when turn N's output (stdout or stderr) matches the extended regex.
refute() {
  if grep -q -E -- "$2" "$WORK/turn$1.out" "$WORK/turn$1.err"; then
    fail "turn $1: $3: $(grep -h -o -E -- ".{0,80}$2.{0,200}" "$WORK/turn$1.out" "$WORK/turn$1.err" | head -n 3)"
  fi
}

check_request_log() {
  python3 "$AGENTS_DIR/request_log.py" "$LOG" "$CLIENT" "${TURN_FIRST_LINE[2]}" ||
    fail "the request log does not show turn 2 served from the prefix cache"
  echo "$CLIENT: ok (network: ${DS_AGENTS_IN_NETNS:-not isolated})"
}
