#!/usr/bin/env bash
# The CPU benchmark of record: Hotline against its peers, side by side, in one run.
#
#   bench/cpu_bench.sh                      everything (models, plans, Hotline, peers, table)
#   HOTLINE=path/to/hotline bench/cpu_bench.sh
#   ITERS=300 REPS=2 SKIP_MODELS=1 SIZES="small" bench/cpu_bench.sh
#
# Cases (PERFORMANCE.md): small 1x32, 1x64, 32x32; base 1x32. Hotline FP32 and BF16 plans via
# `hotline perf`; peers via bench/cpu_peers.py: ONNX Runtime (plain graph), ONNX Runtime after
# onnxruntime.transformers.optimizer, PyTorch FP32 and BF16 autocast. 2 threads each, the same
# input shapes, median of many iterations, peak RSS of a process that runs only that case.
# REPS repetitions are interleaved (every engine once per case, then again) so drift on a shared
# machine hits all engines alike. Raw JSON lines and the table go to bench/out/<UTC stamp>/.
# Benchmarks are never run by `make test`.
set -uo pipefail  # no -e: a failing engine is logged and the rest still runs
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${HOTLINE_PYTHON:-$HOME/.cache/hotline/venv/bin/python}
ITERS=${ITERS:-200}
REPS=${REPS:-2}
SIZES=${SIZES:-small base}
THREADS=${THREADS:-2}
MODELS=$ROOT/bench/models
if [ -z "${HOTLINE:-}" ]; then
  for c in "$ROOT"/build-kernels/hotline "$ROOT"/build-engine/hotline "$ROOT"/build/hotline \
           "$ROOT"/build-*/src/cli/hotline "$ROOT"/build*/hotline; do
    [ -x "$c" ] && HOTLINE=$c && break
  done
fi
[ -x "${HOTLINE:-}" ] || { echo "cpu_bench: no hotline binary (set HOTLINE=...)" >&2; exit 2; }
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-$ROOT/bench/out/$STAMP}
mkdir -p "$OUT"
LOG=$OUT/stderr.log
RAW=$OUT/raw.jsonl
export OMP_NUM_THREADS=$THREADS
# OpenMP threads (Hotline, PyTorch) sleep at barriers instead of spinning: on a shared, oversubscribed
# machine a spinning waiter burns the time slice its partner needs (measured here: Hotline small
# 1x32 p50 170 ms active vs 3.9 ms passive at load 10). ONNX Runtime is run both ways (ort /
# ort_nospin). WAIT_POLICY=active restores OpenMP's default spinning.
export OMP_WAIT_POLICY=${WAIT_POLICY:-passive}
echo "cpu_bench: hotline=$HOTLINE out=$OUT iters=$ITERS reps=$REPS threads=$THREADS"

{
  echo "date_utc: $(date -u '+%Y-%m-%d %H:%M:%S')"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p')"
  echo "cpus: $(nproc)"
  printf 'flags:'
  for f in avx2 fma avx512f avx512_bf16 avx512_vnni amx_bf16; do
    grep -qw "$f" /proc/cpuinfo && printf ' %s' "$f" || printf ' no-%s' "$f"
  done
  echo
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) (working tree may differ)"
  echo "load_before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: ITERS=$ITERS REPS=$REPS SIZES=\"$SIZES\" THREADS=$THREADS WAIT_POLICY=${WAIT_POLICY:-passive} bench/cpu_bench.sh"
  "$PY" -c "import onnxruntime, torch; print('onnxruntime', onnxruntime.__version__, '| torch', torch.__version__)"
} | tee "$OUT/machine.txt"

# ---- 1. models and plans ----
for s in $SIZES; do
  if [ "${SKIP_MODELS:-0}" != 1 ] || [ ! -f "$MODELS/${s}_op17.onnx" ]; then
    "$PY" "$ROOT/bench/make_models.py" --sizes "$s" --opsets 17 >>"$LOG" 2>&1 ||
      echo "make_models $s failed (see $LOG)" >&2
  fi
  "$PY" "$ROOT/bench/cpu_peers.py" --prepare-ort-opt --size "$s" --models "$MODELS" >>"$LOG" 2>&1 ||
    echo "ort optimizer $s failed" >&2
  for p in fp32 bf16; do
    "$HOTLINE" build --onnx "$MODELS/${s}_op17.onnx" --precision $p --backend cpu \
      --profile 1x1:1x32:32x64 -o "$OUT/${s}_$p.plan" >>"$LOG" 2>&1 ||
      echo "hotline build $s $p failed (see $LOG)" >&2
  done
done

# ---- 2. timing, interleaved ----
cases_for() { if [ "$1" = small ]; then echo "1x32 1x64 32x32"; else echo "1x32"; fi; }
tag() {  # engine size case rep: prefix every JSON line with our labels
  "$PY" -c 'import json,sys
e,s,c,r=sys.argv[1:5]
for l in sys.stdin:
    l=l.strip()
    if l.startswith("{"):
        d=json.loads(l); d.update(engine=e,size=s,case=c,rep=int(r)); print(json.dumps(d))' "$@"
}
for rep in $(seq 1 "$REPS"); do
  for s in $SIZES; do
    for c in $(cases_for "$s"); do
      b=${c%x*}; q=${c#*x}
      it=$ITERS; [ "$s" = base ] && it=$((ITERS / 4)); [ "$b" -gt 1 ] && it=$((ITERS / 4))
      [ "$it" -lt 20 ] && it=20
      echo "== rep $rep $s $c $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
      for p in fp32 bf16; do
        [ -f "$OUT/${s}_$p.plan" ] || continue
        "$HOTLINE" perf --plan "$OUT/${s}_$p.plan" --batch "$b" --seq "$q" --iters "$it" \
          2>>"$LOG" | tag "hotline_$p" "$s" "$c" "$rep" | tee -a "$RAW"
      done
      for peer in ort ort_nospin ort_opt torch torch_bf16; do
        "$PY" "$ROOT/bench/cpu_peers.py" --peer $peer --size "$s" --batch "$b" --seq "$q" \
          --iters "$it" --threads "$THREADS" --models "$MODELS" --max-seconds "${MAX_SECONDS:-30}" \
          2>>"$LOG" |
          tag "$peer" "$s" "$c" "$rep" | tee -a "$RAW"
      done
    done
  done
done

echo "load_after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
"$PY" "$ROOT/bench/cpu_summary.py" "$RAW" | tee "$OUT/table.md"
echo "cpu_bench: results in $OUT"
