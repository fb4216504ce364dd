#!/usr/bin/env bash
# Tensor parallel on this machine: one process with T threads against T MPI ranks of one
# thread each, on the same model, at each concurrency: steady decode output tok/s (the C++
# bench client against `serve`, fixed 512-token prompts and 256 new tokens), and from the
# server's own step profile the mean step time and the ranks' communication (residual
# allreduces + logits gather, including any wait for the slower rank) per step.
#
#   bench/distributed/tp_decode.sh [MODEL] [CONCURRENCIES] [SECONDS] [T]
#   default: out/models/bench-100m 1,16 30 2
# Prints one line per (layout, concurrency) and the ratios. Needs a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-out/models/bench-100m}
CONCS=${2:-1,16}
SECS=${3:-30}
T=${4:-2}
CLI=build/deltaserve
[[ -d $MODEL ]] || { echo "no model at $MODEL (make it: $CLI make-model --preset bench-100m --out $MODEL)"; exit 2; }
OUT=$(mktemp -d)
trap 'pkill -f "serve --model $MODEL --port 1876" 2>/dev/null; rm -rf "$OUT"' EXIT
COMMON=(--max-num-seqs 16 --max-model-len 1024 --kv-cache-dtype bf16 --activation-dtype bf16 --no-prefix-caching)

metric() {  # sum and count of a histogram series: name, label
  curl -s "http://127.0.0.1:$PORT/metrics" | awk -v n="$1" -v l="$2" '
    index($0, n "_sum{" l) == 1 { s = $2 } index($0, n "_count{" l) == 1 { c = $2 }
    index($0, n "_sum " ) == 1 && l == "" { s = $2 } index($0, n "_count ") == 1 && l == "" { c = $2 }
    END { printf "%s %s\n", s + 0, c + 0 }'
}

run_point() {  # layout (1xT or Tx1), concurrency
  local layout=$1 c=$2
  PORT=1876$((RANDOM % 10))
  if [[ $layout == "1x$T" ]]; then
    $CLI serve --model "$MODEL" --port "$PORT" --threads "$T" "${COMMON[@]}" >"$OUT/log" 2>&1 &
  else
    mpirun -np "$T" --oversubscribe --allow-run-as-root $CLI serve --model "$MODEL" --port "$PORT" --tp "$T" --threads 1 \
      "${COMMON[@]}" >"$OUT/log" 2>&1 &
  fi
  local srv=$!
  $CLI bench --url "http://127.0.0.1:$PORT" --synthetic fixed --fixed-input-tokens 512 --fixed-output-tokens 256 \
    --concurrency "$c" --duration "$SECS" --wait-for-server 120 --progress-interval 0 --min-observations 1 \
    --out "$OUT/$layout" >"$OUT/bench.log" 2>&1 || { cat "$OUT/bench.log" "$OUT/log"; exit 1; }
  read -r step_s steps < <(metric "deltaserve:step_duration_seconds" "")
  read -r comm_s comm_n < <(metric "deltaserve:forward_part_seconds" 'part="rank_comm"')
  local tok
  tok=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print((d.get('metrics') or d)['throughput']['output_tok_s'])" "$OUT/$layout/c$c/results.json" 2>/dev/null || { python3 -c "import json,sys; print(list(json.load(open(sys.argv[1])).keys()))" "$OUT/$layout/c$c/results.json"; cat "$OUT/bench.log"; exit 1; })
  awk -v l="$layout" -v c="$c" -v t="$tok" -v s="$step_s" -v n="$steps" -v cs="$comm_s" 'BEGIN {
    ms = n > 0 ? 1000 * s / n : 0; cu = n > 0 ? 1e6 * cs / n : 0;
    printf "%-5s c=%-3s output %8.1f tok/s   step %7.2f ms   rank comm %7.1f us/step (%4.1f%% of the step)\n", l, c, t, ms, cu, (ms > 0 ? cu / 10 / ms : 0) }'
  echo "$layout $c $tok" >>"$OUT/points"
  # rank 0 drains on SIGTERM and releases the others (mpirun itself would report a signal)
  for p in $(pgrep -f "serve --model $MODEL --port $PORT"); do
    env=$(tr '\0' '\n' </proc/$p/environ 2>/dev/null || true)
    if grep -q '^OMPI_COMM_WORLD_RANK=' <<<"$env"; then
      if grep -qx 'OMPI_COMM_WORLD_RANK=0' <<<"$env"; then kill -TERM "$p"; fi
    elif [[ $(cat /proc/$p/comm 2>/dev/null) == deltaserve ]]; then kill -TERM "$p"; fi
  done
  wait $srv || true
}

echo "model $MODEL, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for c in ${CONCS//,/ }; do
  run_point "1x$T" "$c"
  run_point "${T}x1" "$c"
done
python3 - "$OUT/points" "$T" <<'PY'
import sys
pts = {}
for line in open(sys.argv[1]):
    l, c, t = line.split(); pts[(l, int(c))] = float(t)
T = sys.argv[2]
for c in sorted({c for _, c in pts}):
    a, b = pts.get((f"1x{T}", c)), pts.get((f"{T}x1", c))
    if a and b: print(f"c={c}: {T} ranks x 1 thread / 1 process x {T} threads = {b / a:.2f}")
PY
