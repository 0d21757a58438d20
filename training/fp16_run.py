"""Copy a run folder with its weights stored as FP16 (half the bytes).

The device tool carries at most 64 MiB with the working tree, so a continuation's --init run
and the runs that come back for training/soup.py travel as FP16 (model.py's load_weights reads
any float dtype into the FP32 model; FP16's 11-bit mantissa is far below what a continuation or
an average notices).

  python3 training/fp16_run.py RUN_DIR OUT_DIR
"""
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import read_weight_arrays, write_weight_shards  # noqa: E402

FP16_MAX = float(np.finfo(np.float16).max)  # 65504: larger magnitudes would become inf


def half_run(run, out):
    """Writes OUT_DIR: RUN_DIR's config.json and metrics.json, and its weights as FP16 (earlier
    weights-*.npz in OUT_DIR removed). Refuses OUT_DIR == RUN_DIR and weights FP16 cannot hold."""
    if os.path.realpath(run) == os.path.realpath(out):
        raise ValueError(f"{out}: the output folder must not be the run itself")
    sd = read_weight_arrays(run, np.float32)
    for k, v in sd.items():
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{run}: tensor {k} holds inf or NaN")
        if v.size and float(np.max(np.abs(v))) > FP16_MAX:
            raise ValueError(f"{run}: tensor {k} has |x| up to {float(np.max(np.abs(v))):g}, "
                             f"beyond FP16's {FP16_MAX:g}")
    os.makedirs(out, exist_ok=True)
    for name in ("config.json", "metrics.json"):
        if os.path.exists(os.path.join(run, name)):
            shutil.copy(os.path.join(run, name), out)
    write_weight_shards(out, {k: v.astype(np.float16) for k, v in sd.items()})


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    try:
        half_run(sys.argv[1], sys.argv[2])
    except (OSError, ValueError) as e:
        raise SystemExit(f"fp16_run: {e}")
