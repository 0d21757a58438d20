#!/usr/bin/env bash
# device-check.sh: one run on the GPU machine for the CUDA backend. Builds nothing there: it
# unpacks a bundle made here and, in one call (keep it under 9 minutes):
#   tests   cuda_kernels_test, cuda_encoder_test, cuda_encoder_quant_test, cuda_backend_test,
#           cuda_backend_quant_test, cuda_fp8_per_tensor_test
#   bench   hotline_cuda_bench (the encoder runner alone)
#   peers   the PyTorch peers, same run (bench_peers.py from the shared peers folder, $HOTLINE_SHARED)
#   model   a BERT-base-sized model folder made there (bench/cuda/make_serve_model.py: the default
#           model's vocabulary and labels, random weights), in the background from the start
#   s2      `hotline serve` with backend cuda, precision fp16 on that model (the pipeline builds
#           and caches the CUDA plan), `hotline bench` against it from the same machine at 64 and
#           256 callers: requests/s and P99 (PERFORMANCE.md S2)
#   perf    `hotline perf` on that FP16 plan: batch 1 x 64 and 128 x 64 through the engine API
#   parity  that FP16 plan against PyTorch FP32 on 1,000 random inputs (bench/cuda/parity.py):
#           relative error <= 1e-2 and the same intent; and the trained default model's FP16
#           plan against ONNX Runtime FP32 on the same kind of inputs; and the default model's
#           FP8 plan against ONNX Runtime FP32 (intent agreement, A2 wants >= 99.5%)
# and prints a short table last. Files under $OUT (at most 8 come back): table.md, summary.json,
# integration.json, hotline_cuda.json, peers_results.json, logs.txt.
#
# Here (the machine with nvcc, no GPU):
#   cmake --build build-X --target hotline cuda_kernels_test cuda_encoder_test cuda_backend_test \
#         cuda_encoder_quant_test cuda_backend_quant_test cuda_fp8_per_tensor_test \
#         cuda_encoder_memory_test hotline_cuda_bench hotline_lt_pdl_probe
#   scripts/device-check.sh --pack build-X        # -> bundle-cuda/ (git-ignored)
# There (through the device tool, carrying bundle-cuda):
#   bash scripts/device-check.sh [--no-tests] [--no-bench] [--no-peers] [--no-s2] [--no-parity]
#        [--peer-deadline S] [--s2-duration S] [--variants]
#   S2_CONC="64 256" (default): the callers counts the S2 load runs at.
#   --variants: also the whole-encoder bench with the other kernel variants (HOTLINE_CUDA_KERNELS
#   set to the opposite of the defaults: hotline_cuda_alt.json) and the per-kernel profile
#   (profile.json): an A/B of the kernels in the same call.
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE_DIR=${BUNDLE_DIR:-bundle-cuda}

if [ "${1:-}" = "--pack" ]; then
  build=${2:-build-cuda}
  mkdir -p "$BUNDLE_DIR/peers"
  cuda=$build/src/engine/cuda
  # The quantised-encoder tests and hotline_lt_pdl_probe (run by hand) are bundled when built
  # (targets cuda_encoder_quant_test, cuda_backend_quant_test, ...); the run below says so loudly
  # when they are missing.
  optional=()
  for t in cuda_encoder_quant_test cuda_backend_quant_test cuda_fp8_per_tensor_test \
           cuda_encoder_memory_test hotline_lt_pdl_probe; do
    if [ -x "$cuda/$t" ]; then optional+=("$cuda/$t"); else echo "NOTE: $cuda/$t not built: not bundled"; fi
  done
  # Stripped copies, and the archive recompressed with xz -9 (a 64 MiB dictionary): every
  # binary carries the same ~12 MB of kernels, which the default 8 MiB dictionary cannot see
  # twice (42 MB -> 20 MB; the device tool carries at most 64 MiB with the tree).
  strip_dir=$(mktemp -d)
  re=$(mktemp -d)
  trap 'rm -rf "$strip_dir" "$re"' EXIT
  for b in "$cuda/cuda_kernels_test" "$cuda/cuda_encoder_test" "$cuda/hotline_cuda_bench" \
           "$cuda/cuda_backend_test" "${optional[@]}" "$build/hotline" \
           "$build/bench/hotline_batcher_bench"; do
    cp "$b" "$strip_dir/" && strip --strip-unneeded "$strip_dir/$(basename "$b")" || exit 1
  done
  scripts/device-bundle.sh "$BUNDLE_DIR/cuda.tar.xz" "$strip_dir"/* || exit 1
  tar -C "$re" -xJf "$BUNDLE_DIR/cuda.tar.xz" &&
    tar -C "$re" -cf - . | xz -9 -T1 >"$BUNDLE_DIR/cuda.tar.xz.new" &&
    mv "$BUNDLE_DIR/cuda.tar.xz.new" "$BUNDLE_DIR/cuda.tar.xz" || exit 1
  rm -rf "$strip_dir" "$re"
  # The PyTorch peers' harness is not part of this repository: HOTLINE_SHARED names the folder
  # that holds it (peers/gpu/bench_peers.py); without it the bundle has no peers and the run's
  # peers section says so.
  if [ -n "${HOTLINE_SHARED:-}" ]; then
    cp "$HOTLINE_SHARED/peers/gpu/bench_peers.py" "$BUNDLE_DIR/peers/" || exit 1
  else
    echo "NOTE: HOTLINE_SHARED unset: the PyTorch peers are not bundled (run with --no-peers)"
  fi
  ls -la "$BUNDLE_DIR"
  exit 0
fi

peers=1; tests=1; bench=1; s2=1; parity=1; peer_deadline=240; s2_duration=10; variants=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-peers) peers=0 ;;
    --no-tests) tests=0 ;;
    --no-bench) bench=0 ;;
    --no-s2) s2=0 ;;
    --no-parity) parity=0 ;;
    --variants) variants=1 ;;
    --peer-deadline) peer_deadline=$2; shift ;;
    --s2-duration) s2_duration=$2; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
. scripts/device-lib.sh  # $OUT, $HL, $LOG, section(), the unpacked bundle
status=0
INT=$OUT/integration.json
echo '{}' >"$INT"
record() {  # record KEY JSON-FILE-OR-TEXT: merges one result into integration.json
  python3 - "$INT" "$1" "$2" <<'PY'
import json, sys
path, key, val = sys.argv[1:4]
d = json.load(open(path))
try:
    d[key] = json.loads(open(val).read()) if not val.startswith("{") else json.loads(val)
except Exception as e:  # noqa: BLE001
    d[key] = {"error": repr(e)}
json.dump(d, open(path, "w"), indent=1)
PY
}

# The base model folder, made in the background while the tests and benchmarks run.
REPO=$HL/repo
model_pid=""
if [ $s2 = 1 ] || [ $parity = 1 ]; then
  (python3 bench/cuda/make_serve_model.py --out $REPO/base --size base --max-batch 256 \
     --instances 4 >$HL/model.json 2>$HL/model.log; echo $? >$HL/model.rc) &
  model_pid=$!
fi

if [ $tests = 1 ]; then
  section tests
  export HOTLINE_SOURCE_DIR=$PWD  # fixtures for cuda_backend_test
  for t in cuda_kernels_test cuda_encoder_test cuda_encoder_quant_test cuda_backend_test \
           cuda_backend_quant_test cuda_fp8_per_tensor_test cuda_encoder_memory_test; do
    if [ ! -x $HL/bin/$t ]; then
      echo "$t: NOT IN THE BUNDLE (not built before --pack): not run" | tee -a "$LOG"
      continue
    fi
    $HL/run $t --gtest_brief=1 >$HL/$t.log 2>&1
    rc=$?
    [ $rc = 0 ] || status=1
    echo "$t: exit $rc" | tee -a "$LOG"
    cat $HL/$t.log >>"$LOG"
    grep -E "FAILED|rel err|vs fp32|vs fp16|MiB|SKIPPED| -> " $HL/$t.log | tail -12
  done
  record tests "{\"status\": $status}"
fi
# The peers' mixed workload lengths (numpy's generator, same seed and call as bench_peers.py).
python3 -c "import numpy as np; print('\n'.join(map(str, np.random.default_rng(20261130).integers(8, 129, size=1024))))" \
  >$HL/mixed_lengths.txt 2>/dev/null || rm -f $HL/mixed_lengths.txt
lengths_arg=""; [ -s $HL/mixed_lengths.txt ] && lengths_arg="--mixed-lengths $HL/mixed_lengths.txt"
if [ $bench = 1 ]; then
  section bench
  $HL/run hotline_cuda_bench --out "$OUT/hotline_cuda.json" $lengths_arg >>"$LOG" 2>&1 \
    || echo "hotline_cuda_bench failed" | tee -a "$LOG"
  if [ $variants = 1 ]; then
    section "bench with the other kernel variants (${ALT_KERNELS:=ln=1,attn=1,pdl=1})"
    HOTLINE_CUDA_KERNELS=$ALT_KERNELS $HL/run hotline_cuda_bench --out "$OUT/hotline_cuda_alt.json" \
      $lengths_arg >>"$LOG" 2>&1 || echo "hotline_cuda_bench ($ALT_KERNELS) failed" | tee -a "$LOG"
    tail -12 "$LOG"
    section "per-kernel profile"
    $HL/run hotline_cuda_bench --profile-only $lengths_arg --out "$OUT/profile.json" \
      >$HL/profile.log 2>&1 || echo "profile failed" | tee -a "$LOG"
    cat $HL/profile.log >>"$LOG"
  fi
fi

if [ -n "$model_pid" ]; then
  section "waiting for the model folder"
  wait $model_pid
  cat $HL/model.json $HL/model.log >>"$LOG"
  if [ "$(cat $HL/model.rc 2>/dev/null)" != 0 ]; then
    echo "make_serve_model failed" | tee -a "$LOG"; tail -5 $HL/model.log; s2=0; parity=0; status=1
  else
    record model $HL/model.json
  fi
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# G4 through the serving core in-process: the 1024 mixed-length requests, all arriving at once,
# behind the dynamic batcher (4 instances with batches of up to 128; 8 with up to 64), FP16.
if [ $s2 = 1 ] && [ -s $HL/mixed_lengths.txt ]; then
  section "g4: batcher in-process (cuda fp16)"
  for cfg in 4x128 8x64; do
    inst=${cfg%x*}; mb=${cfg#*x}
    $HL/run hotline_batcher_bench --model-dir $REPO/base --backend cuda --precision fp16 \
      --instances $inst --max-batch $mb --max-batch-tokens 16384 --delay-us 2000 \
      --lengths $HL/mixed_lengths.txt --passes 5 --json >$HL/g4_$cfg.json 2>>"$LOG"
    cat $HL/g4_$cfg.json | tee -a "$LOG"
    record g4_batcher_$cfg $HL/g4_$cfg.json
  done
fi

PLAN=""
if [ $s2 = 1 ]; then
  section "s2: hotline serve (cuda fp16)"
  GRPC=$(free_port); HTTP=$(free_port)
  cat >$HL/server.yaml <<YAML
host: 127.0.0.1
grpc_port: $GRPC
http_port: $HTTP
model_repository: $REPO
startup_models: ["*"]
log_requests: false
http_threads: 16
max_texts_per_call: 256
backend: cuda
precision: fp16
YAML
  python3 - data/hotline/test.jsonl $HL/texts.txt <<'PY'
import json, sys
out = open(sys.argv[2], "w", encoding="utf-8")
for line in open(sys.argv[1], encoding="utf-8"):
    t = json.loads(line)["text"]
    if 5 <= len(t) <= 60:
        out.write(t.replace("\n", " ") + "\n")
PY
  ts=$(date +%s)
  $HL/run hotline serve --config $HL/server.yaml >$HL/serve.log 2>&1 &
  server_pid=$!
  ready=0
  for _ in $(seq 1 480); do
    if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$HTTP/readyz', timeout=1)" 2>/dev/null; then
      ready=1; break
    fi
    kill -0 $server_pid 2>/dev/null || break
    sleep 0.5
  done
  echo "server ready=$ready after $(( $(date +%s) - ts )) s (plan build + load + warm-up)" | tee -a "$LOG"
  if [ $ready = 1 ]; then
    for c in ${S2_CONC:-64 256}; do
      $HL/run hotline bench --target 127.0.0.1:$GRPC --concurrency $c --duration $s2_duration \
        --warmup 3 --texts $HL/texts.txt --json >$HL/bench_c$c.json 2>>"$LOG"
      cat $HL/bench_c$c.json | tee -a "$LOG"
      record s2_c$c $HL/bench_c$c.json
    done
    python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$HTTP/metrics').read().decode()[:6000])" >>"$LOG" 2>&1
  else
    status=1
  fi
  kill -TERM $server_pid 2>/dev/null; wait $server_pid 2>/dev/null
  echo "--- serve.log (tail)" >>"$LOG"; tail -40 $HL/serve.log >>"$LOG"
  [ $ready = 1 ] || tail -15 $HL/serve.log
  PLAN=$(ls $REPO/base/cache/base-fp16-cuda-*.plan 2>/dev/null | head -1)
fi

if [ $parity = 1 ]; then
  if [ -z "$PLAN" ]; then
    section "building the fp16 plan"
    PLAN=$HL/base-fp16.plan
    $HL/run hotline build --onnx $REPO/base/model.onnx -o $PLAN --backend cuda --precision fp16 \
      --profile 1x1:32x64:256x128 >>"$LOG" 2>&1 || { echo "hotline build failed" | tee -a "$LOG"; status=1; }
  fi
  if [ -s "$PLAN" ]; then
    section "perf (engine API, fp16 plan)"
    for bs in "1 64" "128 64"; do
      set -- $bs
      $HL/run hotline perf --plan "$PLAN" --batch $1 --seq $2 --iters 300 >$HL/perf_$1x$2.json 2>>"$LOG"
      cat $HL/perf_$1x$2.json | tee -a "$LOG"
      record perf_$1x$2 $HL/perf_$1x$2.json
    done
    section "parity vs PyTorch fp32 (1,000 inputs)"
    python3 bench/cuda/parity.py --model-dir $REPO/base --plan "$PLAN" --hotline "$HL/run hotline" \
      --n 1000 --chunk 250 --out $HL/parity.json >>"$LOG" 2>&1 || status=1
    record parity $HL/parity.json
  fi
  # The trained default model too (real weights: intents are well separated), against ONNX
  # Runtime FP32 on its own ONNX file.
  section "parity: default model, fp16 plan vs onnxruntime fp32"
  $HL/run hotline build --onnx models/default/model.onnx -o $HL/default-fp16.plan --backend cuda \
    --precision fp16 --profile 1x1:32x64:256x128 >>"$LOG" 2>&1 \
    && python3 bench/cuda/parity.py --model-dir models/default --plan $HL/default-fp16.plan \
         --hotline "$HL/run hotline" --reference onnx --n 1000 --chunk 250 \
         --out $HL/parity_default.json >>"$LOG" 2>&1 || status=1
  record parity_default $HL/parity_default.json
  # The default model's FP8 plan (QKV/out/FFN GEMMs in E4M3, scales recorded in the plan) vs
  # ONNX Runtime FP32 on the test set's real call text (1,760 utterances, one token per
  # character): PERFORMANCE.md A2 (same intent on >= 99.5%). The plan takes the FP8 defaults
  # (per-tensor weight scales, fast accumulation; recorded in the plan); scripts/device-g3.sh
  # also checks the INT8 cuda plan and the per-channel, exact FP8 build.
  section "parity: default model, fp8 plan vs onnxruntime fp32"
  $HL/run hotline build --onnx models/default/model.onnx -o $HL/default-fp8.plan --backend cuda \
    --precision fp8 --calib data/hotline/calib.jsonl --profile 1x1:32x64:256x128 >>"$LOG" 2>&1 \
    && python3 bench/cuda/parity.py --model-dir models/default --plan $HL/default-fp8.plan \
         --hotline "$HL/run hotline" --reference onnx --n 1760 --chunk 220 --precision fp8 \
         --texts data/hotline/test.jsonl --tol 0.5 --min-agree 0.995 \
         --out $HL/parity_default_fp8.json >>"$LOG" 2>&1 \
    || echo "fp8 parity: build failed or below A2 (see logs.txt)" | tee -a "$LOG"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('fp8 parity: same intent',
    d['intent_agree'], '/', d['n'], 'rel err', d['rel_err'], 'pass', d['pass'])" \
    $HL/parity_default_fp8.json 2>/dev/null | tee -a "$LOG"
  record parity_default_fp8 $HL/parity_default_fp8.json
fi

if [ $peers = 1 ] && [ ! -f "$BUNDLE_DIR/peers/bench_peers.py" ]; then
  echo "PEERS NOT RUN: the bundle has no peers/bench_peers.py (packed without HOTLINE_SHARED)" | tee -a "$LOG"
  peers=0
fi
if [ $peers = 1 ]; then
  section peers
  mkdir -p $HL/peers
  PYTHONUNBUFFERED=1 timeout $((peer_deadline + 60)) python3 "$BUNDLE_DIR/peers/bench_peers.py" \
    --out $HL/peers --tag run --sections env,grid,mixed,compile --models small,base \
    --compile-mode reduce-overhead --compile-tasks base:1x64,base:128x64 \
    --variants eager_fp16_sdpa,cudagraph_fp16_sdpa --batches 1,128 --seqs 64,128 \
    --mixed-passes 1 --target-s 0.3 --deadline-s "$peer_deadline" >$HL/peers.log 2>&1
  echo "peers exit $?" | tee -a "$LOG"
  cat $HL/peers.log >>"$LOG"
  cp $HL/peers/results_run.json "$OUT/peers_results.json" 2>/dev/null
fi
section done
{
  [ $bench = 1 ] && [ -s "$OUT/hotline_cuda.json" ] && python3 bench/cuda/compare.py \
    "$OUT/hotline_cuda.json" "$OUT/peers_results.json" --summary "$OUT/summary.json"
  python3 bench/cuda/integration_table.py "$INT"
} | tee "$OUT/table.md"
exit $status
