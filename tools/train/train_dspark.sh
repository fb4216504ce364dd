#!/bin/bash
# Trains models/deltacoder-dspark, the parallel drafter of models/deltacoder, on the target's
# hidden states over the training corpus (the target frozen), then exports it with metrics.json
# and its golden round for tests/spec/parallel_drafter_test.cpp.
#   tools/train/train_dspark.sh [MINUTES]      (default 35 minutes of training; see README.md)
# Needs the corpus encoded by train.sh in $DELTACODER_WORK (default /tmp/deltacoder-work).
set -euo pipefail
cd "$(dirname "$0")/../.."
MINUTES="${1:-35}"
WORK="${DELTACODER_WORK:-/tmp/deltacoder-work}"
PY=/usr/bin/python3
JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
[ -e "$JEMALLOC" ] && export LD_PRELOAD="$JEMALLOC" MALLOC_CONF="retain:true,dirty_decay_ms:-1,muzzy_decay_ms:-1"
export OMP_WAIT_POLICY=PASSIVE
[ -e "$WORK/train.bin" ] || { echo "no $WORK/train.bin: run the data steps of tools/train/train.sh first" >&2; exit 1; }
t0=$(date +%s)
# In 8-minute pieces that checkpoint and resume, as run_training.sh does (allocator growth).
while true; do
  rc=0
  $PY tools/train/dspark.py train --target models/deltacoder --data "$WORK" --out-dir "$WORK/dspark" \
      --minutes "$MINUTES" --exit-after-minutes 8 || rc=$?
  [ $rc -eq 3 ] || { [ $rc -eq 0 ] || exit $rc; break; }
done 2>&1 | tee -a "$WORK/dspark.log"
$PY tools/train/dspark.py export --target models/deltacoder --ckpt "$WORK/dspark/latest.pt" --data "$WORK" \
    --out models/deltacoder-dspark
$PY tools/train/dspark.py golden --model models/deltacoder-dspark --target models/deltacoder \
    --out tests/data/golden/deltacoder-dspark.json
echo "train_dspark.sh took $(( $(date +%s) - t0 )) s"
