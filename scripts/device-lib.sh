# device-lib.sh: sourced by device-check.sh and device-g3.sh on the GPU machine, from the
# repository root with BUNDLE_DIR set. Unpacks the bundle into $HL, keeps NVLink multicast off
# (KINDS.md), opens $LOG under $OUT, defines `section NAME` (a timed log heading) and records the
# GPU's state.
OUT=${OUT:-$PWD/device-out}
HL=/tmp/hl
LOG=$OUT/logs.txt
mkdir -p "$OUT" $HL
tar -C $HL -xJf "$BUNDLE_DIR/cuda.tar.xz" || { echo "cannot unpack the bundle"; exit 1; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
section() { echo "===== $* ($(( $(date +%s) - t0 )) s)" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv 2>&1 | tee -a "$LOG"
