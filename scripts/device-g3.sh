#!/usr/bin/env bash
# device-g3.sh: one focused call on the GPU machine for the quantised encoder (issue #7: G3, G5,
# A2). Builds nothing there: it unpacks the bundle made here by `scripts/device-check.sh --pack`
# and, in one call (about 4 minutes; 8 with --peers):
#   tests   the CUDA test binaries of the quantised encoder and the kernels it uses
#   bench   hotline_cuda_bench --models base --quant QUANT --variants VARIANTS --profile:
#           BERT-base FP8 / INT8 rows (1x64, 128x64, mixed, memory at 128x128) and the per-kernel
#           profile by graph replays
#   a2      the default model's FP8 plan with the defaults and with FP8_ALT_FLAGS, against
#           ONNX Runtime FP32 on the 1,760 test utterances (PERFORMANCE.md A2: >= 99.5% same intent)
#   peers   (--peers) the PyTorch peers in the same call (bench_peers.py from the shared peers folder, $HOTLINE_SHARED)
# and prints a short table last. Files under $OUT: g3.json (bench), logs.txt, a2_*.json,
# peers_results.json.
#
# Here:  scripts/device-check.sh --pack build-cuda90
# There: bash scripts/device-g3.sh [--no-tests] [--no-bench] [--no-a2] [--peers]
#        VARIANTS=fp8,fp8_exact,... QUANT=fp8,int8 FP8_ALT_FLAGS="--fp8-fast-accum-max-k 0"
#        A2_RUNS="fp8_default fp8_alt int8_default" (the default: all three)
#        BENCH_ARGS="--timing-cache FILE" (more arguments for the bench)
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE_DIR=${BUNDLE_DIR:-bundle-cuda}
tests=1; bench=1; a2=1; peers=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tests) tests=0 ;;
    --no-bench) bench=0 ;;
    --no-a2) a2=0 ;;
    --peers) peers=1 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
VARIANTS=${VARIANTS:-fp8,fp8_exact,fp8_fast1024,fp8_perchannel,int8}
QUANT=${QUANT:-fp8,int8}
FP8_ALT_FLAGS=${FP8_ALT_FLAGS:---fp8-weight-scaling per_channel --fp8-fast-accum-max-k 0}
. scripts/device-lib.sh  # $OUT, $HL, $LOG, section(), the unpacked bundle
summary=$HL/summary.txt
: >$summary

if [ $tests = 1 ]; then
  section tests
  export HOTLINE_SOURCE_DIR=$PWD
  for t in ${TESTS:-cuda_kernels_test cuda_encoder_quant_test cuda_fp8_per_tensor_test \
           cuda_encoder_memory_test cuda_backend_quant_test}; do
    if [ ! -x $HL/bin/$t ]; then echo "$t: NOT IN THE BUNDLE" | tee -a $summary; continue; fi
    $HL/run $t --gtest_brief=1 >$HL/$t.log 2>&1
    rc=$?
    cat $HL/$t.log >>"$LOG"
    echo "$t: exit $rc $(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' $HL/$t.log) failed" | tee -a $summary
    grep -E "FAILED|fast accum|per tensor vs|MiB|own_gemm|default choice" $HL/$t.log | head -12
  done
fi

if [ $bench = 1 ]; then
  section bench
  # The SM clock, power and temperature every 100 ms while the bench runs (clocks.csv): whether
  # the GPU holds its clock under the FP8 GEMMs' load (PERF_NOTES: the in-sequence GEMM gap).
  # (power.draw is a one-second average; power.draw.instant, last, the momentary draw.)
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active,power.draw.instant \
    --format=csv -lms 100 >"$OUT/clocks.csv" 2>&1 &
  smi=$!
  # shellcheck disable=SC2086
  $HL/run hotline_cuda_bench --models base --quant "$QUANT" --variants "$VARIANTS" --profile \
    --target-s 0.6 --out "$OUT/g3.json" ${BENCH_ARGS:-} >$HL/bench.log 2>&1 ||
    echo "bench failed" | tee -a $summary
  kill $smi 2>/dev/null
  cat $HL/bench.log >>"$LOG"
  awk -F', ' 'NR > 1 && $2 + 0 > 0 { n++; c += $2; if (min == "" || $2 + 0 < min) min = $2 + 0;
      if ($4 + 0 > p) p = $4 + 0 } END { if (n) printf "SM clock during the bench: mean %.0f MHz, min %d MHz, peak power %.0f W (%d samples)\n", c / n, min, p, n }' \
    "$OUT/clocks.csv" | tee -a $summary
  grep -E '^base' $HL/bench.log | tee -a $summary
  grep -E '128x64 (attention|layernorm|fp8 per-tensor|embed|own ffn1)' $HL/bench.log | tee -a $summary
fi

if [ $a2 = 1 ]; then
  a2run() {  # a2run NAME PRECISION [hotline build flags...]
    local name=$1 prec=$2; shift 2
    section "a2 $name"
    if $HL/run hotline build --onnx models/default/model.onnx -o $HL/$name.plan --backend cuda \
         --precision $prec --calib data/hotline/calib.jsonl --profile 1x1:32x64:256x128 "$@" \
         >>"$LOG" 2>&1; then
      python3 bench/cuda/parity.py --model-dir models/default --plan $HL/$name.plan \
        --hotline "$HL/run hotline" --reference onnx --n 1760 --chunk 220 --precision $prec \
        --texts data/hotline/test.jsonl --tol 0.5 --min-agree 0.995 \
        --out "$OUT/a2_$name.json" >>"$LOG" 2>&1
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('A2 $name ($prec $*): same intent',
        d['intent_agree'], '/', d['n'], 'rel err', d['rel_err'], 'pass', d['pass'])" \
        "$OUT/a2_$name.json" 2>&1 | tee -a $summary
    else
      echo "A2 $name: build failed (logs.txt)" | tee -a $summary
    fi
  }
  for run in ${A2_RUNS:-fp8_default fp8_alt int8_default}; do
    case $run in
      fp8_default) a2run fp8_default fp8 ;;
      # shellcheck disable=SC2086
      fp8_alt) a2run fp8_alt fp8 $FP8_ALT_FLAGS ;;
      int8_default) a2run int8_default int8 ;;
      *) echo "A2: unknown run $run" | tee -a $summary ;;
    esac
  done
fi

if [ $peers = 1 ] && [ ! -f "$BUNDLE_DIR/peers/bench_peers.py" ]; then
  echo "PEERS NOT RUN: the bundle has no peers/bench_peers.py (packed without HOTLINE_SHARED)" | tee -a "$LOG"
  peers=0
fi
if [ $peers = 1 ]; then
  section peers
  mkdir -p $HL/peers
  PYTHONUNBUFFERED=1 timeout $((${PEER_DEADLINE:-240} + 60)) python3 "$BUNDLE_DIR/peers/bench_peers.py" \
    --out $HL/peers --tag run --sections env,grid,compile --models base \
    --compile-mode reduce-overhead --compile-tasks base:1x64,base:128x64 \
    --variants eager_fp16_sdpa,cudagraph_fp16_sdpa --batches 1,128 --seqs ${PEER_SEQS:-64,128} \
    --target-s 0.3 --deadline-s ${PEER_DEADLINE:-240} >$HL/peers.log 2>&1
  echo "peers exit $?" | tee -a "$LOG"
  cat $HL/peers.log >>"$LOG"
  cp $HL/peers/results_run.json "$OUT/peers_results.json" 2>/dev/null
  grep -E 'base.*(128x64|1x64)' $HL/peers.log | tail -12 | tee -a $summary
fi
section done
echo "---- summary ----"
cat $summary
