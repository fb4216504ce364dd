#!/bin/bash
# Reproduces models/deltacoder and models/deltacoder-draft from scratch on the CPU.
#   tools/train/train.sh [MINUTES]      (default 75 minutes of training; see README.md)
# Needs: Debian python3-torch, python3-numpy, libopenblas0-pthread, libjemalloc2.
set -euo pipefail
cd "$(dirname "$0")/../.."
MINUTES="${1:-75}"
WORK="${DELTACODER_WORK:-/tmp/deltacoder-work}"
PY=/usr/bin/python3
mkdir -p "$WORK/ckpt"
# Allocator and OpenMP settings: on this kind of VM, fresh pages fault very slowly (jemalloc
# that keeps freed memory avoids it) and OpenMP threads spin-waiting on a shared 2-core
# machine burn ~10x the CPU of the work itself (PASSIVE waits instead).
JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
if [ -e "$JEMALLOC" ]; then
  export LD_PRELOAD="$JEMALLOC" MALLOC_CONF="retain:true,dirty_decay_ms:-1,muzzy_decay_ms:-1"
else
  echo "warning: libjemalloc2 not installed; training will be several times slower" >&2
fi
export OMP_WAIT_POLICY=PASSIVE
t0=$(date +%s)
$PY tools/train/data.py split --root /usr/lib/python3.11 --out-dir "$WORK" --recipe "$WORK/corpus.json"
$PY tools/train/bpe.py train --files-from "$WORK/train_files.txt" --vocab-size 4096 --out "$WORK/tokenizer.json"
$PY tools/train/data.py encode --tokenizer "$WORK/tokenizer.json" --out-dir "$WORK"
tools/train/run_training.sh "$WORK" "$MINUTES" 2>&1 | tee "$WORK/train.log"
$PY tools/train/export.py --ckpt "$WORK/ckpt/latest.pt" --data "$WORK" --tokenizer "$WORK/tokenizer.json" --out-root models
for m in deltacoder deltacoder-draft; do
  $PY tools/reference/make_golden.py --model "models/$m" --out "tests/data/golden/$m.json"
done
echo "train.sh took $(( $(date +%s) - t0 )) s"
