#!/usr/bin/env bash
# device-train.sh: one device call that trains the default model's candidates on the GPU
# (training/gpu_sweep.sh) while the CUDA tests run, then times our engine once the GPU is idle.
# Results come back as two archives under $OUT (the device tool returns at most 8 files).
#   here:  scripts/device-check.sh --pack build-cuda
#          python3 training/train.py --data data/hotline --encode-only --cache build-train/cache3.json.gz
#   there: CACHE=build-train/cache3.json.gz bash scripts/device-train.sh   (carry bundle-cuda and the cache)
# Env: BUDGET (seconds per training run, 300), EPOCHS (60), CACHE, PEERS (1: also the PyTorch peers),
#      TRAIN_ONLY (1: training alone, no engine tests or benchmarks; no bundle needed),
#      CHECK_DURING / CHECK_AFTER (device-check.sh arguments for the check that runs beside the
#      training and the one after it; unset: tests and parity during, bench/s2/parity after; set
#      to "": everything),
#      RETURN_ALL (1: every run's weights come back too, as FP16, for averaging: training/soup.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export BUDGET=${BUDGET:-300} EPOCHS=${EPOCHS:-60} CACHE=${CACHE:-build-train/cache3.json.gz}
t0=$(date +%s)
bash training/gpu_sweep.sh /tmp/sweep >/tmp/sweep.log 2>&1 &
train_pid=$!
mkdir -p /tmp/dc
# TRAIN_ONLY=1: the GPU is left to training (no engine tests or timing in this call).
[ "${TRAIN_ONLY:-0}" = 1 ] || OUT=/tmp/dc bash scripts/device-check.sh ${CHECK_DURING---no-peers --no-bench}
wait $train_pid
echo "training done after $(( $(date +%s) - t0 )) s"
tail -12 /tmp/sweep.log
if [ "${TRAIN_ONLY:-0}" = 1 ]; then
  :
elif [ "${PEERS:-0}" = 1 ]; then
  OUT=/tmp/dc bash scripts/device-check.sh --no-tests --peer-deadline 150
else
  OUT=/tmp/dc bash scripts/device-check.sh ${CHECK_AFTER---no-tests --no-peers}
fi
cp /tmp/sweep.log /tmp/dc/
# The device tool returns files of at most 16 MiB: the archive goes back in 15 MB parts
# (join here with `cat train.tar.gz.* > train.tar.gz`).
extra=()
if [ "${RETURN_ALL:-0}" = 1 ]; then
  # Every run's weights as FP16 (half the bytes; averaging and a continuation lose nothing that
  # matters), beside its config and metrics.
  mkdir -p /tmp/sweep/runs
  for d in "${RUNS_DIR:-/tmp/hotline_runs}"/*/; do
    [ -f "$d/config.json" ] || continue
    n=$(basename "$d")
    python3 training/fp16_run.py "$d" /tmp/sweep/runs/$n || echo "RETURN_ALL: $n not returned"
  done
  extra=(sweep/runs)
fi
tar -C /tmp -czf /tmp/train.tar.gz sweep/best sweep/summary.json sweep/logs.txt "${extra[@]}"
split -b 15M -d /tmp/train.tar.gz "$OUT/train.tar.gz."
tar -C /tmp -czf "$OUT/check.tar.gz" dc
ls -la "$OUT"
echo "all done after $(( $(date +%s) - t0 )) s"
