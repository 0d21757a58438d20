"""Copy a run folder with its weights stored as FP16 (half the bytes).

The device tool carries at most 64 MiB with the working tree, so a continuation's --init run
and the runs that come back for training/soup.py travel as FP16 (train.py's load_weights reads
any float dtype into the FP32 model; FP16's 11-bit mantissa is far below what a continuation or
an average notices).

  python3 training/fp16_run.py RUN_DIR OUT_DIR
"""
import glob
import os
import shutil
import sys

import numpy as np


def half_run(run, out):
    shards = sorted(glob.glob(os.path.join(run, "weights-*.npz")))
    if not shards:
        raise SystemExit(f"no weights-*.npz in {run}")
    os.makedirs(out, exist_ok=True)
    for name in ("config.json", "metrics.json"):
        if os.path.exists(os.path.join(run, name)):
            shutil.copy(os.path.join(run, name), out)
    for p in shards:
        with np.load(p, allow_pickle=False) as z:
            np.savez(os.path.join(out, os.path.basename(p)),
                     **{k: z[k].astype(np.float16) for k in z.files})


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    half_run(sys.argv[1], sys.argv[2])
