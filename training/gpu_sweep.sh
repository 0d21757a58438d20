#!/usr/bin/env bash
# Train several configurations side by side on one GPU and keep the best by dev score.
# Runs on the device machine (python3 there has torch 2.x with CUDA); reads the encoded data set
# that `train.py --encode-only --cache build-train/cache.json.gz` wrote here.
#   bash training/gpu_sweep.sh OUT_DIR
# Env: SWEEP (wide: six configurations; focus: three longer runs of the MLM one; v3: four MLM
#      runs with different regularisation; v4: two MLM runs, 4 and 5 layers; v4ft: two continuations of INIT; v5: three continuations of INIT, with and without --ema, one with label smoothing; v6: three continuations of INIT, all with --ema; finetune: three runs continuing from INIT),
#      CACHE (build-train/cache.json.gz), BUDGET (seconds per run, 200), EPOCHS (40), PY (python3),
#      EXTRA (extra train.py arguments for every run, e.g. for a quick local check).
set -u
OUT=${1:?usage: gpu_sweep.sh OUT_DIR}
CACHE=${CACHE:-build-train/cache.json.gz}
BUDGET=${BUDGET:-200}
EPOCHS=${EPOCHS:-40}
PY=${PY:-python3}
EXTRA=${EXTRA:-}
RUNS=${RUNS_DIR:-/tmp/hotline_runs}
export PYTHONUNBUFFERED=1
rm -rf "$RUNS"; mkdir -p "$RUNS" "$OUT"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'

run() {
  local name=$1; shift
  $PY training/train.py --cache "$CACHE" --out "$RUNS/$name" --epochs "$EPOCHS" \
      --time-budget "$BUDGET" --threads 2 "$@" $EXTRA > "$RUNS/$name.log" 2>&1
  echo "finished $name rc=$?"
}
if [ "${SWEEP:-wide}" = v5 ]; then
  # Data v5: three continuations of INIT (the shipped v4 model's run folder; one call's budget
  # does not fit MLM plus enough fine-tuning epochs from scratch): scored on the weights' moving
  # average (--ema) or, as the control, on the live weights; one with intent label smoothing.
  : "${INIT:?SWEEP=v5 needs INIT=RUN_DIR}"
  AUG="--aug-swap 0.5 --aug-drop 0.3 --aug-filler 0.3 --dropout 0.15 --warmup 0.05"
  run v5_ft_ema --init "$INIT" --batch-size 64 --lr 3e-4 $AUG --ema 0.999 --seed 42 &
  run v5_ft --init "$INIT" --batch-size 64 --lr 3e-4 $AUG --seed 43 &
  run v5_ft_ema_ls --init "$INIT" --batch-size 64 --lr 3e-4 $AUG --ema 0.999 --intent-smoothing 0.1 --seed 44 &
elif [ "${SWEEP:-wide}" = v6 ]; then
  # Data v6: three continuations of INIT (the v5 model's run folder), different seeds and
  # learning rates, all scored on their moving average; with RETURN_ALL=1 (device-train.sh) all
  # three come back for training/soup.py to average.
  : "${INIT:?SWEEP=v6 needs INIT=RUN_DIR}"
  AUG="--aug-swap 0.5 --aug-drop 0.3 --aug-filler 0.3 --dropout 0.15 --warmup 0.05"
  run v6_a --init "$INIT" --batch-size 64 --lr 3e-4 $AUG --ema 0.999 --intent-smoothing 0.1 --seed 51 &
  run v6_b --init "$INIT" --batch-size 64 --lr 2e-4 $AUG --ema 0.999 --intent-smoothing 0.1 --seed 52 &
  run v6_c --init "$INIT" --batch-size 64 --lr 3e-4 $AUG --ema 0.999 --seed 53 &
elif [ "${SWEEP:-wide}" = finetune ]; then
  # Continue from INIT (a run folder with the same shape, e.g. the focus sweep's best) on the
  # current data: no MLM again, a lower learning rate, two regularisation strengths.
  : "${INIT:?SWEEP=finetune needs INIT=RUN_DIR}"
  run ft_a --init "$INIT" --batch-size 64 --lr 3e-4 --warmup 0.05 --seed 4 &
  run ft_b --init "$INIT" --batch-size 64 --lr 3e-4 --warmup 0.05 --dropout 0.2 --aug-drop 0.3 --aug-filler 0.3 --seed 5 &
  run ft_c --init "$INIT" --batch-size 128 --lr 4e-4 --warmup 0.05 --seed 6 &
elif [ "${SWEEP:-wide}" = v4ft ]; then
  # Continue v4's selected run (INIT) at lower learning rates: its schedule ended after the 10
  # epochs its time budget allowed.
  : "${INIT:?SWEEP=v4ft needs INIT=RUN_DIR}"
  AUG="--aug-swap 0.5 --aug-drop 0.3 --aug-filler 0.3 --dropout 0.15 --warmup 0.05"
  run v4ft_a --init "$INIT" --batch-size 64 --lr 2e-4 $AUG --seed 31 &
  run v4ft_b --init "$INIT" --batch-size 64 --lr 1e-4 $AUG --seed 32 &
elif [ "${SWEEP:-wide}" = v4 ]; then
  # Two runs alone on the GPU (data v4): the v3 recipe (MLM, then fine-tuning with heavier
  # augmentation) at 4 layers, and the same at 5 layers (24.6 MB of weights, under the 25 MB cap).
  AUG="--aug-swap 0.5 --aug-drop 0.3 --aug-filler 0.3 --dropout 0.15 --warmup 0.05"
  run v4_l4 --batch-size 64 --lr 5e-4 --mlm-steps 6000 $AUG --seed 21 &
  run v4_l5 --layers 5 --batch-size 64 --lr 5e-4 --mlm-steps 6000 $AUG --seed 22 &
elif [ "${SWEEP:-wide}" = v3 ]; then
  # Four runs of the MLM configuration on data v3: plain, heavier augmentation and dropout,
  # larger batch with longer MLM, longer MLM with more dropout.
  run v3_a --batch-size 64 --lr 5e-4 --mlm-steps 4000 --seed 1 &
  run v3_b --batch-size 64 --lr 5e-4 --mlm-steps 4000 --aug-swap 0.5 --aug-drop 0.3 --aug-filler 0.3 --dropout 0.15 --seed 2 &
  run v3_c --batch-size 64 --lr 5e-4 --mlm-steps 6000 --aug-swap 0.5 --aug-drop 0.4 --aug-filler 0.4 --dropout 0.2 --seed 3 &
  run v3_d --batch-size 128 --lr 8e-4 --mlm-steps 6000 --aug-drop 0.3 --dropout 0.15 --seed 4 &
elif [ "${SWEEP:-wide}" = focus ]; then
  # Fewer, longer runs of the configuration that won the wide sweep (MLM first).
  run mlm_s1   --batch-size 64 --lr 5e-4 --mlm-steps 4000 --seed 1 &
  run mlm_s2   --batch-size 64 --lr 5e-4 --mlm-steps 4000 --seed 2 &
  run mlm_b128 --batch-size 128 --lr 8e-4 --mlm-steps 4000 --seed 3 &
else
  run base     --batch-size 64 --lr 5e-4 &
  run mlm      --batch-size 64 --lr 5e-4 --mlm-steps 3000 &
  run mlm_lr1e3 --batch-size 64 --lr 1e-3 --mlm-steps 3000 &
  run mlm_aug  --batch-size 64 --lr 5e-4 --mlm-steps 3000 --aug-swap 0.5 --aug-drop 0.3 --aug-filler 0.3 --dropout 0.15 &
  run lr1e3    --batch-size 64 --lr 1e-3 &
  run mlm_s2   --batch-size 64 --lr 5e-4 --mlm-steps 3000 --seed 2 &
fi
wait
for f in "$RUNS"/*.log; do echo "== $f"; cat "$f"; done > "$OUT/logs.txt"
grep -h -E "best epoch|time budget|Error|error" "$RUNS"/*.log
$PY training/select_run.py "$RUNS" "$OUT"
