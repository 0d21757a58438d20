#!/usr/bin/env bash
# device-pretrain.sh: one GPU-machine call that pretrains the encoder (training/pretrain.py,
# resumed from build-train/pretrain when an earlier call left weights there) and then fine-tunes
# the fine-tuning jobs named in JOBS on it, returning every run's weights as FP16 archives.
#   here:  python3 training/corpus.py --corpus CORPUS            (shards, vocab, Haikou splits)
#          python3 training/train_classifier.py --data build-train/corpus/haikou \
#              --vocab build-train/corpus/vocab.txt --cache build-train/haikou.json.gz --encode-only
#   there: PRETRAIN_S=420 JOBS="haikou" bash scripts/device-pretrain.sh
#          (run tool: carry build-train/corpus/*.npz, vocab.txt, the caches, build-train/pretrain)
# Env: PRETRAIN_S (seconds of pretraining, 0: none), MODEL ("6 256 4 1024": layers hidden heads
#      ffn), JOBS (space-separated, run side by side: haikou*, joint*, cais*), JOINT_ARGS /
#      HAIKOU_ARGS / CAIS_ARGS (extra arguments per kind), ARGS_<job> (per job), JOB_S
#      (seconds per fine-tuning job), NO_WEIGHTS (jobs whose weights stay: metrics only), SOUP
#      (joint jobs to average after training).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT" /tmp/runs
export PYTHONUNBUFFERED=1
t0=$(date +%s)
read -r L H A F <<<"${MODEL:-6 256 4 1024}"
PRE=build-train/pretrain
mkdir -p "$PRE"
if [ "${PRETRAIN_S:-0}" != 0 ]; then
  # Weights of an earlier call come as FP16 shards; pretrain.py resumes from fp32 ckpt.pt or,
  # failing that, from the weights (a fresh optimiser, short warm-up).
  python3 training/pretrain.py --corpus-dir build-train/corpus --out "$PRE" --layers "$L" \
      --hidden "$H" --heads "$A" --ffn "$F" --time-budget "$PRETRAIN_S" \
      ${PRETRAIN_ARGS:-} 2>&1 | tee "$OUT/pretrain.log" | grep -E "step [0-9]*000 |saved|resumed|device"
fi
# Fine-tuning jobs run side by side (a small model leaves most of the GPU idle). A job name is
# its kind plus an optional suffix (joint, joint2, ...); ARGS_<name> adds arguments to that job.
pids=()
for job in ${JOBS:-}; do
  extra_var="ARGS_$job"
  extra=${!extra_var:-}
  case $job in
    haikou*)
      python3 training/train_classifier.py --cache build-train/haikou.json.gz \
          --init-encoder "$PRE" --out "/tmp/runs/$job" --time-budget "${JOB_S:-150}" \
          ${HAIKOU_ARGS:-} $extra >"$OUT/$job.log" 2>&1 & ;;
    joint*)
      python3 training/train.py --cache build-train/joint/cache.json.gz --init-encoder "$PRE" \
          --taxonomy build-train/joint/taxonomy.yaml --out "/tmp/runs/$job" \
          --time-budget "${JOB_S:-150}" ${JOINT_ARGS:-} $extra >"$OUT/$job.log" 2>&1 & ;;
    cais*)
      python3 training/train.py --cache build-train/cais/cache.json.gz --init-encoder "$PRE" \
          --taxonomy build-train/cais/taxonomy.yaml --out "/tmp/runs/$job" \
          --time-budget "${JOB_S:-150}" ${CAIS_ARGS:-} $extra >"$OUT/$job.log" 2>&1 & ;;
    *) echo "unknown job $job"; exit 2 ;;
  esac
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || echo "a job failed (pid $p)"; done
# SOUP="jointA jointB": the greedy weight average of those joint runs (training/soup.py), kept
# as the run "soup" when it scores at least as well on dev as the best of them.
if [ -n "${SOUP:-}" ]; then
  python3 training/soup.py --cache build-train/joint/cache.json.gz --out /tmp/runs/soup \
      --threads 8 $(for j in $SOUP; do echo "/tmp/runs/$j"; done) >"$OUT/soup.log" 2>&1 ||
    echo "soup failed (see soup.log)"
  tail -5 "$OUT/soup.log"
fi
for job in ${JOBS:-}; do echo "== $job"; grep -E "best epoch|challenge|calibration|test:|epoch [0-9]+:" "$OUT/$job.log" | tail -4; done
# FP16 copies of the weights (half the bytes; what the model folders store anyway).
mkdir -p /tmp/ret
[ "${PRETRAIN_S:-0}" != 0 ] && { python3 training/fp16_run.py "$PRE" /tmp/ret/pretrain ||
  echo "pretrain weights not returned"; }
for d in /tmp/runs/*/; do
  n=$(basename "$d")
  case " ${NO_WEIGHTS:-} " in *" $n "*) mkdir -p "/tmp/ret/$n"; cp "$d"/*.json "/tmp/ret/$n/"; continue ;; esac
  [ -f "$d/config.json" ] && python3 training/fp16_run.py "$d" "/tmp/ret/$n"
done
# The device tool returns at most 8 files: the logs travel inside the archive, and the
# archive's parts are all that is left in OUT.
mkdir -p /tmp/ret/logs && mv "$OUT"/*.log /tmp/ret/logs/ 2>/dev/null
tar -C /tmp -czf /tmp/ret.tar.gz ret
split -b 15M -d /tmp/ret.tar.gz "$OUT/ret.tar.gz."
n=$(ls "$OUT" | wc -l)
[ "$n" -le 8 ] || echo "WARNING: $n files in OUT; the device tool returns only 8 (put jobs in NO_WEIGHTS)"
ls -la "$OUT"
echo "all done after $(( $(date +%s) - t0 )) s"
