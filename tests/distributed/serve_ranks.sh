#!/usr/bin/env bash
# `deltaserve serve` under mpirun: the rank checks refuse bad layouts with one line each; a
# 2-rank server answers and reports its ranks; a SIGTERM to rank 0 drains and ends every rank
# with 0; a killed rank, and a stopped one, end the run non-zero with a message instead of a hang.
set -uo pipefail
CLI=$1
MPIRUN=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TINY=$ROOT/tests/data/models/tiny-hybrid-f32
WORK=$(mktemp -d)
# On exit, only what this script started goes: each server recorded in STARTED with every process
# below it (mpirun's ranks), never a match on command lines that could hit someone else's run.
STARTED=()
tree() { local c; for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree "$c"; done; echo "$1"; }
cleanup() {
  local p q
  for p in "${STARTED[@]}"; do
    for q in $(tree "$p"); do kill -CONT "$q" 2>/dev/null; kill -9 "$q" 2>/dev/null; done
  done
  rm -rf "$WORK"
  true
}
trap cleanup EXIT
MPI=("$MPIRUN" -np 2 --oversubscribe --allow-run-as-root)
fail() { echo "FAIL: $*"; exit 1; }

# One start-up line each, exit non-zero, nothing hangs.
expect_error() {  # text, then the command
  local want=$1; shift
  local out
  out=$(timeout 60 "$@" 2>&1); local rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "expected an error ($want), rc $rc: $out"
  grep -q -- "$want" <<<"$out" || fail "expected '$want' in: $out"
  echo "ok: $want"
}
expect_error "does not divide the model's KDA heads" "${MPI[@]}" "$CLI" serve --model "$ROOT/models/deltacoder" --tp 2 --port 0
expect_error "does not divide --tp 2" "${MPI[@]}" "$CLI" serve --model "$TINY" --tp 2 --dcp 3 --port 0
expect_error "does not divide the block size" "${MPI[@]}" "$CLI" serve --model "$TINY" --dcp 2 --block-size 15 --port 0
expect_error "mpirun started 2 processes but --tp 1 --dcp 1 takes 1" "${MPI[@]}" "$CLI" serve --model "$TINY" --port 0
expect_error "start it with mpirun -np 2" "$CLI" serve --model "$TINY" --tp 2 --port 0
expect_error "gives each rank" "${MPI[@]}" "$CLI" serve --model "$TINY" --tp 2 --total-cpu-dram-gb 1000000 --port 0

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rank_pid() { rank_pid_of "serve --model $TINY --tp 2 --port $2" "$1"; }
rank_pid_of() {  # the pid of rank $2 of the processes whose command line has $1
  for p in $(pgrep -f "$1"); do
    env=$(tr '\0' '\n' </proc/$p/environ 2>/dev/null)
    grep -qx "OMPI_COMM_WORLD_RANK=$2" <<<"$env" && { echo "$p"; return; }
  done
}
start() {  # port, extra flags; sets SRV (mpirun's pid)
  "${MPI[@]}" "$CLI" serve --model "$TINY" --tp 2 --port "$1" --threads 1 "${@:2}" >"$WORK/log_$1" 2>&1 &
  SRV=$!
  STARTED+=("$SRV")
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 $SRV 2>/dev/null || break
    sleep 0.25
  done
  cat "$WORK/log_$1"; fail "the 2-rank server on $1 did not start"
}

# Serves, reports its ranks, and a SIGTERM to rank 0 ends every rank with 0.
P=$(port); start "$P"
answer=$(curl -sf "http://127.0.0.1:$P/v1/completions" -H 'content-type: application/json' \
  -d '{"prompt":"hello","max_tokens":8,"temperature":0}')
grep -q '"text"' <<<"$answer" || fail "no completion"
card=$(curl -sf "http://127.0.0.1:$P/v1/models")
python3 - "$card" <<'PY' || fail "bad parallel card: $card"
import json, sys
p = json.loads(sys.argv[1])["data"][0]["parallel"]
assert p["tp"] == 2 and p["dcp"] == 1 and p["ranks"] == 2, p
assert [r["rank"] for r in p["rank_memory"]] == [0, 1], p
assert all(r["weights_bytes"] > 0 and r["kv_pool_bytes"] > 0 for r in p["rank_memory"]), p
PY
# (read whole first: grep -q ending a pipe early would fail it under pipefail)
metrics=$(curl -sf "http://127.0.0.1:$P/metrics")
grep -q 'deltaserve:rank_layout{kind="tp"} 2' <<<"$metrics" || fail "no rank_layout in /metrics"
grep -q 'deltaserve:rank_memory_bytes{kind="weights",rank="1"}' <<<"$metrics" || fail "no rank memory in /metrics"
kill -TERM "$(rank_pid 0 "$P")"
timeout 60 tail --pid=$SRV -f /dev/null || fail "SIGTERM did not end the run"
wait $SRV; rc=$?
[[ $rc -eq 0 ]] || { cat "$WORK/log_$P"; fail "SIGTERM to rank 0: mpirun exit $rc, expected 0"; }
echo "ok: serves with 2 ranks, reports them, drains on SIGTERM"

# The bundled model with decode context parallel (its 3 heads do not split over 2 ranks, but
# its KV cache does): answers as one process does, token for token.
P=$(port)
"$CLI" serve --model "$ROOT/models/deltacoder" --port "$P" --threads 1 >"$WORK/log_one" 2>&1 &
ONE=$!
STARTED+=("$ONE")
for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$P/health" >/dev/null 2>&1 && break; sleep 0.25; done
REQ='{"prompt":"def fibonacci(n):","max_tokens":24,"temperature":0}'
one=$(curl -sf "http://127.0.0.1:$P/v1/completions" -H 'content-type: application/json' -d "$REQ" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
kill -TERM $ONE; wait $ONE
P=$(port)
"${MPI[@]}" "$CLI" serve --model "$ROOT/models/deltacoder" --dcp 2 --port "$P" --threads 1 >"$WORK/log_dcp" 2>&1 &
SRV=$!
STARTED+=("$SRV")
for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$P/health" >/dev/null 2>&1 && break; sleep 0.25; done
two=$(curl -sf "http://127.0.0.1:$P/v1/completions" -H 'content-type: application/json' -d "$REQ" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
kill -TERM "$(rank_pid_of "serve --model $ROOT/models/deltacoder --dcp 2 --port $P" 0)"
wait $SRV || { cat "$WORK/log_dcp"; fail "the dcp 2 server did not end with 0"; }
[[ -n $one && "$one" == "$two" ]] || fail "deltacoder with --dcp 2 answered '$two', one process '$one'"
echo "ok: deltacoder with --dcp 2 answers as one process"

# A killed rank: the run ends non-zero, with a message, well within the step timeout.
P=$(port); start "$P" --rank-step-timeout-s 5
kill -9 "$(rank_pid 1 "$P")"
curl -s -m 20 "http://127.0.0.1:$P/v1/completions" -H 'content-type: application/json' \
  -d '{"prompt":"hello","max_tokens":8,"temperature":0}' >/dev/null 2>&1
timeout 30 tail --pid=$SRV -f /dev/null || fail "a killed rank left the run hanging"
wait $SRV; rc=$?
[[ $rc -ne 0 ]] || fail "a killed rank: exit 0"
grep -qE "process rank 1 .*exited on signal 9" "$WORK/log_$P" || { cat "$WORK/log_$P"; fail "a killed rank: no message"; }
echo "ok: a killed rank ends the run (exit $rc)"

# A stopped rank (alive but silent): the step timeout ends the run with the message.
P=$(port); start "$P" --rank-step-timeout-s 3
kill -STOP "$(rank_pid 1 "$P")"
curl -s -m 20 "http://127.0.0.1:$P/v1/completions" -H 'content-type: application/json' \
  -d '{"prompt":"hello","max_tokens":8,"temperature":0}' >/dev/null 2>&1
timeout 30 tail --pid=$SRV -f /dev/null || fail "a stopped rank left the run hanging"
wait $SRV; rc=$?
[[ $rc -ne 0 ]] || fail "a stopped rank: exit 0"
grep -q "has not finished after" "$WORK/log_$P" || { cat "$WORK/log_$P"; fail "a stopped rank: no timeout message"; }
echo "ok: a stopped rank ends the run after the step timeout (exit $rc)"
