#!/usr/bin/env bash
# device-check.sh: one run on the GPU machine for the CUDA backend. Builds nothing there: it
# unpacks a bundle made here, runs the CUDA tests, our benchmark and — in the same run — the
# PyTorch peers, and prints a short table last (full results under $OUT).
#
# Here (the machine with nvcc, no GPU):
#   cmake --build build-cuda --target cuda_kernels_test cuda_encoder_test hotline_cuda_bench
#   scripts/device-check.sh --pack build-cuda        # -> bundle-cuda/ (git-ignored)
# There (through the device tool, carrying bundle-cuda):
#   bash scripts/device-check.sh [--no-peers] [--no-tests] [--no-bench] [--peer-deadline S]
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE_DIR=bundle-cuda

if [ "${1:-}" = "--pack" ]; then
  build=${2:-build-cuda}
  mkdir -p "$BUNDLE_DIR/peers"
  /work/shared/tools/device-bundle "$BUNDLE_DIR/cuda.tar.xz" \
    "$build/src/engine/cuda/cuda_kernels_test" "$build/src/engine/cuda/cuda_encoder_test" \
    "$build/src/engine/cuda/hotline_cuda_bench" "$build/src/engine/cuda/cuda_backend_test"
  cp /work/shared/peers/gpu/bench_peers.py "$BUNDLE_DIR/peers/"
  ls -la "$BUNDLE_DIR"
  exit 0
fi

peers=1; tests=1; bench=1; peer_deadline=240
while [ $# -gt 0 ]; do
  case "$1" in
    --no-peers) peers=0 ;;
    --no-tests) tests=0 ;;
    --no-bench) bench=0 ;;
    --peer-deadline) peer_deadline=$2; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT" /tmp/hl
tar -C /tmp/hl -xJf "$BUNDLE_DIR/cuda.tar.xz" || { echo "cannot unpack the bundle"; exit 1; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
t0=$(date +%s)
status=0
if [ $tests = 1 ]; then
  export HOTLINE_SOURCE_DIR=$PWD  # fixtures for cuda_backend_test
  for t in cuda_kernels_test cuda_encoder_test cuda_backend_test; do
    /tmp/hl/run $t --gtest_brief=1 >>"$OUT/tests.log" 2>&1
    rc=$?
    [ $rc = 0 ] || status=1
    echo "$t: exit $rc"
  done
  grep -E "PASSED|FAILED|rel err|seed" "$OUT/tests.log" | tail -20
fi
echo "tests done after $(( $(date +%s) - t0 )) s"
# The peers' mixed workload lengths (numpy's generator, same seed and call as bench_peers.py).
python3 -c "import numpy as np; print('\n'.join(map(str, np.random.default_rng(20261130).integers(8, 129, size=1024))))" \
  >/tmp/hl/mixed_lengths.txt 2>/dev/null || rm -f /tmp/hl/mixed_lengths.txt
lengths_arg=""; [ -s /tmp/hl/mixed_lengths.txt ] && lengths_arg="--mixed-lengths /tmp/hl/mixed_lengths.txt"
if [ $bench = 1 ]; then
  /tmp/hl/run hotline_cuda_bench --out "$OUT/hotline_cuda.json" $lengths_arg 2>&1 | tee "$OUT/bench.log"
  echo "bench done after $(( $(date +%s) - t0 )) s"
fi
if [ $peers = 1 ]; then
  mkdir -p "$OUT/peers"
  PYTHONUNBUFFERED=1 timeout $((peer_deadline + 60)) python3 "$BUNDLE_DIR/peers/bench_peers.py" \
    --out "$OUT/peers" --tag run --sections env,grid,mixed --models small,base \
    --variants eager_fp16_sdpa,cudagraph_fp16_sdpa --batches 1,128 --seqs 64,128 \
    --mixed-passes 1 --target-s 0.3 --deadline-s "$peer_deadline" >"$OUT/peers.log" 2>&1
  echo "peers exit $? after $(( $(date +%s) - t0 )) s"
  tail -5 "$OUT/peers.log"
fi
[ $bench = 1 ] && python3 bench/cuda/compare.py "$OUT/hotline_cuda.json" "$OUT/peers/results_run.json" \
  --summary "$OUT/summary.json" | tee "$OUT/table.md"
exit $status
