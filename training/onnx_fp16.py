"""Stores an ONNX model's float weights as FP16: each FLOAT initializer of at least MIN_ELEMS
elements becomes a FLOAT16 initializer `<name>.fp16` followed by a Cast(to=FLOAT) node that
produces the original name. The graph computes in FP32 as before (ONNX Runtime runs it as is; the
engine folds the casts at import), on weights rounded to FP16: half the bytes on disk.

round_state_dict_fp16 gives the PyTorch weights the same rounding, so that a parity check
compares like with like.
"""
import numpy as np

MIN_ELEMS = 64
FP16_MAX = float(np.finfo(np.float16).max)


def store_fp16(path, min_elems=MIN_ELEMS):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    m = onnx.load(path)
    g = m.graph
    casts, keep = [], []
    for init in g.initializer:
        if init.data_type != TensorProto.FLOAT or int(np.prod(init.dims or [1])) < min_elems:
            keep.append(init)
            continue
        arr = numpy_helper.to_array(init)
        if not np.all(np.isfinite(arr)) or (arr.size and np.abs(arr).max() > FP16_MAX):
            raise ValueError(f"initializer {init.name} does not fit FP16")
        half = numpy_helper.from_array(arr.astype(np.float16), init.name + ".fp16")
        keep.append(half)
        casts.append(helper.make_node("Cast", [half.name], [init.name], to=TensorProto.FLOAT,
                                      name=init.name + ".cast"))
    del g.initializer[:]
    g.initializer.extend(keep)
    nodes = casts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return len(casts)


def round_state_dict_fp16(model, min_elems=MIN_ELEMS):
    """Rounds the model's float parameters of at least `min_elems` elements through FP16."""
    import torch
    with torch.no_grad():
        for p in model.state_dict().values():
            if p.is_floating_point() and p.numel() >= min_elems:
                p.copy_(p.half().float())
    return model


def weight_map(state_dict, onnx_path, prefix=""):
    """{state-dict key: [initializer name, transposed]} for the encoder weights in an exported
    file, found by value (the export renames and transposes some): what lets a later training
    start from a shipped model folder (train_classifier.py --init-model). Keys under `prefix`
    only, the prefix removed."""
    import onnx
    from onnx import numpy_helper
    inits = {}
    for init in onnx.load(onnx_path).graph.initializer:
        arr = numpy_helper.to_array(init)
        inits.setdefault((arr.shape, arr.dtype.kind), []).append((init.name, arr))
    out = {}
    for key, t in state_dict.items():
        if not key.startswith(prefix) or not t.is_floating_point():
            continue
        v = t.detach().cpu().numpy()
        found = None
        for transposed, arr in ((False, v), (True, v.T if v.ndim == 2 else None)):
            if arr is None:
                continue
            for name, cand in inits.get((arr.shape, "f"), []):
                if np.array_equal(cand.astype(np.float32), arr.astype(np.float16).astype(np.float32)
                                  if cand.dtype == np.float16 else arr):
                    found = [name, transposed]
                    break
            if found:
                break
        if found:
            out[key[len(prefix):]] = found
    return out


def load_mapped(folder):
    """The encoder weights of a model folder (model.onnx + weights_map.json) as
    ({state-dict key: float32 array}, {layers, hidden, heads, ffn})."""
    import json
    import os
    import onnx
    from onnx import numpy_helper
    with open(os.path.join(folder, "weights_map.json"), encoding="utf-8") as f:
        doc = json.load(f)
    wmap = doc["weights"]
    inits = {i.name: i for i in onnx.load(os.path.join(folder, "model.onnx")).graph.initializer}
    out = {}
    for key, (name, transposed) in wmap.items():
        if name not in inits:
            raise ValueError(f"{folder}: weights_map.json names {name}, not in model.onnx")
        arr = numpy_helper.to_array(inits[name]).astype(np.float32)
        out[key] = arr.T.copy() if transposed else arr
    return out, doc["encoder"]
