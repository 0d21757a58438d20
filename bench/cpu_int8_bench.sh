#!/usr/bin/env bash
# The CPU INT8 benchmark of record (PERFORMANCE.md C1, C3, M1 in INT8; A2 on the default model):
# Hotline's INT8 plan against ONNX Runtime's INT8 peers, side by side, in one run.
#
#   bench/cpu_int8_bench.sh
#   HOTLINE=path/to/hotline ITERS=300 REPS=3 bench/cpu_int8_bench.sh
#   SKIP_A2=1 bench/cpu_int8_bench.sh          (speed only; A2_PRECISIONS=fp32,int8 for fewer rows)
#
# Engines (small model, bench/models/small_op17.onnx, random weights, vocab 21128):
#   hotline_fp32, hotline_int8   `hotline perf` on plans built here (INT8 calibrated on
#                                data/hotline/calib.jsonl through models/default/vocab.txt)
#   ort_fp32                     ONNX Runtime on the plain graph
#   ort_int8_dynamic             onnxruntime.quantization.quantize_dynamic
#   ort_int8_static              onnxruntime.quantization.quantize_static (QDQ), calibrated on the
#                                same call text through the same vocabulary
# (bench/cpu_int8_peers.py). Cases: C1 batch 1 x seq 32 latency, C3 batch 32 x seq 32 throughput,
# M1 peak RSS of a process running only batch 1 x seq 32. 2 threads each; REPS repetitions,
# interleaved (every engine once per case, then again) so drift on a shared machine hits all alike.
# A2: `hotline eval --compare-precisions --precisions fp32,int8` on models/default and
# data/hotline/test.jsonl (intent agreement, accuracy, slot F1, plan size, peak RSS).
# Raw JSON lines, TSV and the table go to bench/out/int8-<UTC stamp>/. Never run by `make test`.
set -uo pipefail  # no -e: a failing engine is logged and the rest still runs
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${HOTLINE_PYTHON:-$HOME/.cache/hotline/venv/bin/python}
ITERS=${ITERS:-200}
REPS=${REPS:-2}
THREADS=${THREADS:-2}
MODELS=${MODELS:-$ROOT/bench/models}
CALIB=${CALIB:-$ROOT/data/hotline/calib.jsonl}
VOCAB=${VOCAB:-$ROOT/models/default/vocab.txt}
if [ -z "${HOTLINE:-}" ]; then
  for c in "$ROOT"/build-gate/hotline "$ROOT"/build-int8/hotline "$ROOT"/build/hotline \
           "$ROOT"/build*/hotline; do
    [ -x "$c" ] && HOTLINE=$c && break
  done
fi
[ -x "${HOTLINE:-}" ] || { echo "cpu_int8_bench: no hotline binary (set HOTLINE=...)" >&2; exit 2; }
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-$ROOT/bench/out/int8-$STAMP}
mkdir -p "$OUT"
LOG=$OUT/stderr.log
RAW=$OUT/raw.jsonl
export OMP_NUM_THREADS=$THREADS
export OMP_WAIT_POLICY=${WAIT_POLICY:-passive}  # see bench/cpu_bench.sh: sleep, don't spin
echo "cpu_int8_bench: hotline=$HOTLINE out=$OUT iters=$ITERS reps=$REPS threads=$THREADS"
{
  echo "date_utc: $(date -u '+%Y-%m-%d %H:%M:%S')"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p')"
  echo "cpus: $(nproc)"
  printf 'flags:'
  for f in avx2 avx512f avx512_bf16 avx512_vnni amx_int8; do
    grep -qw "$f" /proc/cpuinfo && printf ' %s' "$f" || printf ' no-%s' "$f"
  done
  echo
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) (working tree may differ)"
  echo "load_before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: ITERS=$ITERS REPS=$REPS THREADS=$THREADS bench/cpu_int8_bench.sh"
  "$PY" -c "import onnxruntime; print('onnxruntime', onnxruntime.__version__)"
} | tee "$OUT/machine.txt"

# ---- 1. models, peers, plans ----
if [ ! -f "$MODELS/small_op17.onnx" ]; then
  "$PY" "$ROOT/bench/make_models.py" --sizes small --opsets 17 >>"$LOG" 2>&1 ||
    echo "make_models small failed (see $LOG)" >&2
fi
if [ "${SKIP_PREPARE:-0}" != 1 ] || [ ! -f "$MODELS/small_int8_static.onnx" ]; then
  "$PY" "$ROOT/bench/cpu_int8_peers.py" --prepare --size small --models "$MODELS" \
    --calib "$CALIB" --vocab "$VOCAB" 2>>"$LOG" | tee -a "$OUT/prepare.jsonl"
fi
# `hotline build --calib` tokenises with the vocab.txt beside the ONNX: give it the default one.
PLANDIR=$OUT/small
mkdir -p "$PLANDIR"
ln -sf "$MODELS/small_op17.onnx" "$PLANDIR/model.onnx"
[ -f "$MODELS/small_op17.onnx.data" ] && ln -sf "$MODELS/small_op17.onnx.data" "$PLANDIR/"
cp "$VOCAB" "$PLANDIR/vocab.txt"
for p in fp32 int8; do
  extra=()
  [ $p = int8 ] && extra=(--calib "$CALIB")
  /usr/bin/time -f "build_$p: %e s, peak RSS %M KB" \
    "$HOTLINE" build --onnx "$PLANDIR/model.onnx" --precision $p --backend cpu \
    --profile 1x1:1x32:32x64 "${extra[@]}" -o "$OUT/small_$p.plan" 2>>"$LOG" ||
    echo "hotline build small $p failed (see $LOG)" >&2
done
ls -l "$OUT"/small_*.plan "$MODELS"/small_op17.onnx "$MODELS"/small_int8_*.onnx 2>/dev/null |
  awk '{print $5, $9}' | tee "$OUT/sizes.txt"

# ---- 2. timing, interleaved ----
tag() {  # engine case rep: label every JSON line
  "$PY" -c 'import json,sys
e,c,r=sys.argv[1:4]
for l in sys.stdin:
    l=l.strip()
    if l.startswith("{"):
        d=json.loads(l); d.update(engine=e,size="small",case=c,rep=int(r)); print(json.dumps(d))' "$@"
}
for rep in $(seq 1 "$REPS"); do
  for c in 1x32 32x32; do
    b=${c%x*}; q=${c#*x}
    it=$ITERS; [ "$b" -gt 1 ] && it=$((ITERS / 4)); [ "$it" -lt 20 ] && it=20
    echo "== rep $rep small $c $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    for p in fp32 int8; do
      [ -f "$OUT/small_$p.plan" ] || continue
      "$HOTLINE" perf --plan "$OUT/small_$p.plan" --batch "$b" --seq "$q" --iters "$it" \
        2>>"$LOG" | tag "hotline_$p" "$c" "$rep" | tee -a "$RAW"
    done
    for peer in ort_fp32 ort_int8_dynamic ort_int8_static; do
      "$PY" "$ROOT/bench/cpu_int8_peers.py" --peer $peer --size small --batch "$b" --seq "$q" \
        --iters "$it" --threads "$THREADS" --models "$MODELS" --spin 0 \
        --max-seconds "${MAX_SECONDS:-30}" 2>>"$LOG" | tag "$peer" "$c" "$rep" | tee -a "$RAW"
    done
  done
done
echo "load_after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"

# ---- 3. A2 on the default model ----
if [ "${SKIP_A2:-0}" != 1 ]; then
  "$HOTLINE" eval --model "$ROOT/models/default" --data "$ROOT/data/hotline/test.jsonl" \
    --compare-precisions --precisions "${A2_PRECISIONS:-fp32,bf16,int8}" --calib "$CALIB" --json \
    2>>"$LOG" >"$OUT/a2.json" || echo "A2 eval failed (see $LOG)" >&2
fi

"$PY" "$ROOT/bench/cpu_int8_summary.py" "$OUT" | tee "$OUT/table.md"
echo "cpu_int8_bench: results in $OUT"
