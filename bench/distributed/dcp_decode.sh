#!/usr/bin/env bash
# Decode step time at a long context on bench-100m: one process (1 and 2 threads) against 2
# ranks of 1 thread with decode context parallel (dcp 2, tp 1: the whole model on each rank,
# the KV split by tokens) and with tp 2 + dcp 2.
#   bench/distributed/dcp_decode.sh [MODEL] [CONTEXT] [ROWS]   (default out/models/bench-100m 32768 1)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-out/models/bench-100m}
CTX=${2:-32768}
ROWS=${3:-1}
B=build/bench/distributed/dcp_decode
MPI=(mpirun -np 2 --oversubscribe --allow-run-as-root)
echo "model $MODEL, context $CTX, rows $ROWS, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
$B "$MODEL" --threads 1 --context "$CTX" --rows "$ROWS"
$B "$MODEL" --threads 2 --context "$CTX" --rows "$ROWS"
"${MPI[@]}" $B "$MODEL" --dcp 2 --threads 1 --context "$CTX" --rows "$ROWS"
"${MPI[@]}" $B "$MODEL" --tp 2 --dcp 2 --threads 1 --context "$CTX" --rows "$ROWS"
"${MPI[@]}" $B "$MODEL" --tp 2 --threads 1 --context "$CTX" --rows "$ROWS"
