# FP8 E4M3 weight scaling on a real model's weights, on the CPU (numpy emulation of E4M3:
# round to nearest even, 3 mantissa bits, subnormals down to 2^-9, saturating at 448): for each
# 2-D initializer of the ONNX model, the relative error ||x.Wq - x.W|| / ||x.W|| on random x when
# W is quantised with one scale for the whole matrix (per tensor, max|W|/448: QuantGemm's
# WeightScaling::kPerTensor) and with one scale per output column (per channel), and the fraction
# of weights that fall below E4M3's normal range under the per-tensor scale.
#   python3 bench/cuda/fp8_weight_scaling_check.py [models/default/model.onnx]
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def e4m3(x):
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    e = np.maximum(np.floor(np.log2(np.maximum(a, 1e-30))), -6)  # subnormals: exponent -6
    q = 2.0 ** (e - 3)
    r = np.minimum(np.round(a / q) * q, 448.0)  # np.round: half to even
    return np.sign(x) * r


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "models/default/model.onnx"
    m = onnx.load(path)
    rng = np.random.default_rng(0)
    pts, pcs = [], []
    for t in m.graph.initializer:
        w = numpy_helper.to_array(t).astype(np.float32)
        if w.ndim != 2 or min(w.shape) < 64 or w.shape[0] > 4096:  # linear layers (not vocab)
            continue
        st = np.abs(w).max() / 448
        sc = np.abs(w).max(axis=0) / 448
        sc[sc == 0] = 1
        x = rng.standard_normal((256, w.shape[0]))
        y = x @ w
        ept = np.linalg.norm(x @ (e4m3(w / st) * st) - y) / np.linalg.norm(y)
        epc = np.linalg.norm(x @ (e4m3(w / sc) * sc) - y) / np.linalg.norm(y)
        pts.append(ept)
        pcs.append(epc)
        print(f"{t.name[:40]:40s} {str(w.shape):12s} per tensor {ept:.4f} per channel {epc:.4f} "
              f"below normal {np.mean(np.abs(w / st) < 2**-6):.4f}")
    print(f"mean over {len(pts)} matrices: per tensor {np.mean(pts):.4f}, per channel "
          f"{np.mean(pcs):.4f}; worst {np.max(pts):.4f} / {np.max(pcs):.4f}")


if __name__ == "__main__":
    main()
