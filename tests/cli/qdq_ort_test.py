"""A QDQ model made by ONNX Runtime's own quantiser, imported and run by Hotline in INT8, against
ONNX Runtime's execution of the same QDQ model (issue 7: "import explicitly quantised models and
honour their scales").

The model: tests/fixtures/engine/tiny_op17.onnx (2 layers, hidden 64) through
onnxruntime.quantization.quantize_static(QuantFormat.QDQ), S8 symmetric activations, S8
per-channel weights, on the GEMMs with constant weights (Hotline's INT8 GEMMs; attention's
activation×activation products stay fp32 on both sides), outputs of the GEMMs not re-quantised,
and the weights then re-coded (as a QAT export with 7-bit weights would store them) on the grid
Hotline's CPU INT8 GEMMs use: per channel, codes in [-63, 63] with scale max|w| / 63
(cpu::S8WeightQmax, so that u8×s8 AVX-512/VNNI products cannot saturate). Hotline re-derives each
channel's scale from the dequantised weights, which gives back exactly the model's codes and
scales. (A model with 8-bit weight codes is re-gridded to 7 bits on CPU: its activation scales
are honoured exactly, its weights to within half a 7-bit step.) The Gemm biases, which ORT
stores as int32 on the old weight scale, become float.
Then both engines compute the same thing: GEMMs on the same int8 grids (activation scale from the
Q/DQ pair, per-channel weight scales), the rest in fp32. What differs is fp32 rounding (fused
kernels, summation order), which now and then moves an activation across a rounding boundary of its
int8 grid. So the tolerance is relative to the quantisation error itself: Hotline must sit about as
close to ONNX Runtime's QDQ result as that result sits to the fp32 model (mean absolute
difference of the logits; see the test for the measured figures).

That the model's scales are used (not a calibration of Hotline's own) is checked by a second QDQ
model, the same one with every activation scale multiplied by 8: ONNX Runtime's error grows
several times, and Hotline's must too; and the plan's recorded ranges must be 127 * the model's
scales, with every GEMM in INT8.
"""
import json
import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)

HOTLINE = os.environ.get("HOTLINE_BIN", "hotline")
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "fixtures", "engine", "tiny_op17.onnx")
VOCAB = 300  # the fixture's word table


def feeds(seed, batch, seq, lengths=None):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(batch, seq)).astype(np.int64)
    ids[:, 0] = 1
    mask = np.ones_like(ids)
    if lengths:
        for r, n in enumerate(lengths):
            mask[r, n:] = 0
            ids[r, n:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


class Reader(CalibrationDataReader):
    def __init__(self):
        self.it = iter([feeds(100 + k, 2, 16) for k in range(16)])

    def get_next(self):
        return next(self.it, None)


def gemm_nodes(model):
    inits = {i.name for i in model.graph.initializer}
    consts = inits | {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    return [n.name for n in model.graph.node
            if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in consts]


def regrid_weights(path, qmax):
    """Re-codes every DQ'd int8 weight per channel on [-qmax, qmax] (scale max|w| / qmax) and turns
    DQ'd int32 biases into float initializers."""
    m = onnx.load(path)
    inits = {i.name: i for i in m.graph.initializer}
    drop = []
    for n in m.graph.node:
        if n.op_type != "DequantizeLinear" or n.input[0] not in inits:
            continue
        q = numpy_helper.to_array(inits[n.input[0]])
        s = numpy_helper.to_array(inits[n.input[1]]).astype(np.float64)
        axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
        shape = [1] * q.ndim
        if s.ndim:
            shape[axis] = -1
        w = q.astype(np.float64) * s.reshape(shape)
        if q.dtype == np.int32:  # bias: float from now on
            inits[n.input[0]].CopyFrom(numpy_helper.from_array(w.astype(np.float32), n.output[0]))
            drop.append(n)
            continue
        red = tuple(k for k in range(q.ndim) if k != axis) if s.ndim else None
        amax = np.abs(w).max(axis=red, keepdims=True)
        s2 = np.where(amax > 0, amax / qmax, 1.0)
        q2 = np.clip(np.rint(w / s2), -qmax, qmax).astype(np.int8)
        inits[n.input[0]].CopyFrom(numpy_helper.from_array(q2, n.input[0]))
        inits[n.input[1]].CopyFrom(numpy_helper.from_array(
            s2.reshape(s.shape).astype(np.float32), n.input[1]))
    for n in drop:
        m.graph.node.remove(n)
    onnx.save(m, path)


def run_ort(path, feed):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # QDQ as written
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(None, feed)))


def run_hotline(plan, feed, tmp):
    inp = os.path.join(tmp, "in.json")
    with open(inp, "w") as f:
        json.dump({k: v.tolist() for k, v in feed.items()}, f)
    p = subprocess.run([HOTLINE, "infer", "--plan", plan, "--input", inp], capture_output=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    return {k: np.array(v, dtype=np.float32) for k, v in json.loads(p.stdout).items()}


def valid(out, feed):
    """Per-sequence outputs as they are; per-token outputs at real tokens only."""
    m = feed["attention_mask"].astype(bool)
    return {"intent_logits": out["intent_logits"], "slot_logits": out["slot_logits"][m]}


def maxdiff(a, b):
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("qdq")
    q = str(d / "tiny_qdq.onnx")
    quantize_static(FIXTURE, q, Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    per_channel=True, nodes_to_quantize=gemm_nodes(onnx.load(FIXTURE)),
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                   "OpTypesToExcludeOutputQuantization": ["MatMul", "Gemm"]})
    regrid_weights(q, 63)
    # The same model with every activation scale 8 times coarser.
    m = onnx.load(q)
    inits = {i.name: i for i in m.graph.initializer}
    act_scales, scaled = {}, set()
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[0] not in inits:
            act_scales[n.input[0]] = float(numpy_helper.to_array(inits[n.input[1]]))
            if n.input[1] not in scaled:  # Q and its DQ share the scale initializer
                scaled.add(n.input[1])
                t = inits[n.input[1]]
                coarse = (numpy_helper.to_array(t) * np.float32(8)).astype(np.float32)
                t.CopyFrom(numpy_helper.from_array(coarse, t.name))
    coarse = str(d / "tiny_qdq_coarse.onnx")
    onnx.save(m, coarse)
    assert act_scales, "quantize_static wrote no activation Q/DQ pairs"
    return {"dir": str(d), "qdq": q, "coarse": coarse, "act_scales": act_scales}


def build(onnx_path, plan, precision="int8"):
    p = subprocess.run([HOTLINE, "build", "--onnx", onnx_path, "--precision", precision,
                        "--profile", "1x1:2x16:4x32", "--no-tune", "-o", plan],
                       capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()


def test_qdq_model_runs_int8_with_its_own_scales(models, tmp_path):
    d = str(tmp_path)
    plan, plan_c = os.path.join(d, "q.plan"), os.path.join(d, "qc.plan")
    build(models["qdq"], plan)  # no --calib: the Q/DQ pairs are the calibration
    build(models["coarse"], plan_c)
    feed = feeds(7, 3, 24, lengths=[24, 17, 9])
    fp32 = valid(run_ort(FIXTURE, feed), feed)
    ort_q = valid(run_ort(models["qdq"], feed), feed)
    ort_c = valid(run_ort(models["coarse"], feed), feed)
    ours_q = valid(run_hotline(plan, feed, d), feed)
    ours_c = valid(run_hotline(plan_c, feed, d), feed)

    def mean_abs(x, y):
        return float(np.mean(np.concatenate([np.abs(x[k] - y[k]).ravel() for k in x])))

    quant_err = mean_abs(ort_q, fp32)  # what quantisation itself costs, on average
    assert quant_err > 1e-4, "the QDQ model computes the fp32 result: nothing quantised?"
    # Hotline's INT8 result is an INT8 result of the same size as ONNX Runtime's ...
    ours_err = mean_abs(ours_q, fp32)
    assert 0.3 * quant_err < ours_err < 2 * quant_err, (ours_err, quant_err)
    # ... and no farther from ONNX Runtime's than ONNX Runtime's is from fp32 (+25%). Measured:
    # 0.0127 vs 0.0145. (Equal grids would ideally give nearly equal noise; they do not yet:
    # see the report of helper int8-gate. This bound catches gross errors: wrong scales, wrong
    # channels, a GEMM left out.)
    assert mean_abs(ours_q, ort_q) <= 1.25 * quant_err, (mean_abs(ours_q, ort_q), quant_err)
    # The model's scales steer the result: 8 times coarser activation grids cost ONNX Runtime
    # about 6 times the error, and Hotline (which would calibrate the same ranges either way)
    # must lose at least 3 times as much too.
    assert mean_abs(ort_c, fp32) > 3 * quant_err
    assert mean_abs(ours_c, fp32) > 3 * ours_err, (mean_abs(ours_c, fp32), ours_err)
    # Same argmax decisions as ONNX Runtime's QDQ execution on nearly every position.
    for k in ("intent_logits", "slot_logits"):
        agree = float((ours_q[k].argmax(-1) == ort_q[k].argmax(-1)).mean())
        assert agree >= 0.9, (k, agree)


def test_plan_records_the_models_scales(models, tmp_path):
    plan = os.path.join(str(tmp_path), "q.plan")
    build(models["qdq"], plan)
    p = subprocess.run([HOTLINE, "inspect", "--json", plan], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    info = json.loads(p.stdout)
    text = json.dumps(info)
    assert '"qdq"' in text, "the plan does not say its ranges came from the model's Q/DQ pairs"
    dense = [op for op in info["ops"] if op["type"] in ("Dense", "DenseLayerNorm")]
    # Every GEMM the model quantised (all with constant weights) runs in int8.
    assert dense and all(op["precision"] == "int8" for op in dense), dense
    # Every range the plan recorded is 127 * one of the model's activation scales.
    amaxes = list(_find_numbers(info["build"]["int8"], "in_amax"))
    assert info["build"]["int8"]["method"] == "qdq"
    assert amaxes, "the plan records no activation ranges"
    want = sorted(127 * s for s in models["act_scales"].values())
    for a in amaxes:
        assert min(abs(a - w) / w for w in want) < 1e-5, a


def _find_numbers(obj, key):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key and isinstance(v, (int, float)):
                yield float(v)
            else:
                yield from _find_numbers(v, key)
    elif isinstance(obj, list):
        for v in obj:
            yield from _find_numbers(v, key)


def test_plain_fp32_build_of_a_qdq_model_is_the_fp32_equivalent(models, tmp_path):
    """Without INT8, the Q/DQ pairs are removed and the weights are the dequantised ones."""
    d = str(tmp_path)
    plan = os.path.join(d, "f.plan")
    build(models["qdq"], plan, precision="fp32")
    feed = feeds(9, 2, 12)
    ours = valid(run_hotline(plan, feed, d), feed)
    # Reference: the QDQ model with the activation pairs bypassed, run by ONNX Runtime.
    m = onnx.load(models["qdq"])
    inits = {i.name for i in m.graph.initializer}
    rename, keep = {}, []
    qs = {n.output[0]: n.input[0] for n in m.graph.node
          if n.op_type == "QuantizeLinear" and n.input[0] not in inits}
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear" and n.output[0] in qs:
            continue
        if n.op_type == "DequantizeLinear" and n.input[0] in qs:
            rename[n.output[0]] = qs[n.input[0]]
            continue
        keep.append(n)
    for n in keep:
        for i, x in enumerate(n.input):
            if x in rename:
                n.input[i] = rename[x]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    bypass = os.path.join(d, "bypass.onnx")
    onnx.save(m, bypass)
    ref = valid(run_ort(bypass, feed), feed)
    assert maxdiff(ours, ref) < 1e-3 * max(1.0, max(float(np.abs(v).max()) for v in ref.values()))
