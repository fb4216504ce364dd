#!/bin/bash
# Runs train.py in restartable pieces: each process checkpoints and exits (status 3) after
# --exit-after-minutes and is resumed, which bounds the memory the allocator retains.
#   run_training.sh WORK MINUTES [extra train.py args]
set -uo pipefail
cd "$(dirname "$0")/../.."
WORK="$1"; MINUTES="$2"; shift 2
JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
[ -e "$JEMALLOC" ] && export LD_PRELOAD="$JEMALLOC" MALLOC_CONF="retain:true,dirty_decay_ms:-1,muzzy_decay_ms:-1"
export OMP_WAIT_POLICY=PASSIVE
while true; do
  /usr/bin/python3 tools/train/train.py --data "$WORK" --ckpt-dir "$WORK/ckpt" --minutes "$MINUTES" \
      --resume --exit-after-minutes 8 "$@"
  rc=$?
  [ $rc -eq 3 ] || exit $rc
done
