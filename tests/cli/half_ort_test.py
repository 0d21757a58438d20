"""BERTs that store their weights as FLOAT16 (or BFLOAT16) initializers, each followed by a
Cast(to=FLOAT), as the shipped model folders do: Hotline imports them, the encoder still fuses
exactly as the FP32 file's does (`hotline inspect`), and its outputs match ONNX Runtime's on the
same half-width file.

The models: tests/fixtures/engine/tiny_hf17.onnx (transformers' BertModel export) and
tiny_op17.onnx (plain PyTorch), rewritten by tests/fixtures/half_weights.py.
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

HOTLINE = os.environ.get("HOTLINE_BIN", "hotline")
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")
sys.path.insert(0, FIXTURES)
from half_weights import to_half  # noqa: E402

VOCAB = 300  # the fixtures' word table


def feeds(seed, lengths, seq):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(len(lengths), seq)).astype(np.int64)
    ids[:, 0] = 1
    mask = np.zeros_like(ids)
    tt = np.zeros_like(ids)
    for r, n in enumerate(lengths):
        ids[r, n - 1] = 2
        ids[r, n:] = 0
        mask[r, :n] = 1
        tt[r, n // 2:n] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}


def run_ort(path, feed):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(None, feed)))


def hotline(*args):
    p = subprocess.run([HOTLINE, *args], capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def run_hotline(plan, feed, tmp):
    inp = os.path.join(tmp, "in.json")
    with open(inp, "w") as f:
        json.dump({k: v.tolist() for k, v in feed.items()}, f)
    out = json.loads(hotline("infer", "--plan", plan, "--input", inp))
    return {k: np.array(v, dtype=np.float32) for k, v in out.items()}


def valid(out, feed):
    """Per-sequence outputs as they are; per-token outputs at real tokens only."""
    m = feed["attention_mask"].astype(bool)
    return {"intent_logits": out["intent_logits"], "slot_logits": out["slot_logits"][m]}


def maxdiff(a, b):
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def fused_ops(plan):
    info = json.loads(hotline("inspect", "--json", plan))
    assert info["mode"] == "packed", info.get("build", {}).get("padded_reason")
    hist = {}
    for op in info["ops"]:
        hist[op["type"]] = hist.get(op["type"], 0) + 1
    return hist, info


@pytest.mark.parametrize("name,bf16", [("tiny_hf17", False), ("tiny_op17", False),
                                       ("tiny_hf17", True)])
def test_half_weights_fuse_and_match_onnxruntime(name, bf16, tmp_path):
    d = str(tmp_path)
    src = os.path.join(FIXTURES, "engine", name + ".onnx")
    half = os.path.join(d, name + ("_bf16" if bf16 else "_fp16") + ".onnx")
    model = to_half(onnx.load(src), bf16=bf16)
    onnx.save(model, half)
    casts = sum(n.op_type == "Cast" for n in model.graph.node)
    want_type = onnx.TensorProto.BFLOAT16 if bf16 else onnx.TensorProto.FLOAT16
    assert casts >= 40 and all(i.data_type == want_type for i in model.graph.initializer)

    plans = {}
    for tag, path in (("fp32", src), ("half", half)):
        plans[tag] = os.path.join(d, tag + ".plan")
        hotline("build", "--onnx", path, "--precision", "fp32", "--profile", "1x1:2x16:4x32",
                "--no-tune", "-o", plans[tag])
    # The same fused encoder as the FP32 file: no Cast survives, the attention, embedding and
    # LayerNorm fusions all matched.
    ref_hist, ref_info = fused_ops(plans["fp32"])
    hist, info = fused_ops(plans["half"])
    assert hist == ref_hist, (hist, ref_hist)
    assert hist.get("Attention") == 2 and hist.get("EmbedLayerNorm") == 1, hist
    assert "Cast" not in hist
    # The weights' Casts were folded at import: the imported graph is the FP32 file's.
    assert info["build"]["ops_imported"] == ref_info["build"]["ops_imported"]

    feed = feeds(3, [24, 17, 9], 24)
    ours = valid(run_hotline(plans["half"], feed, d), feed)
    theirs = valid(run_ort(half, feed), feed)
    full = valid(run_ort(src, feed), feed)
    # What the half-width storage itself changes, so that the bound below means something.
    rounding = maxdiff(theirs, full)
    assert rounding > 1e-4, "the half-width weights compute the FP32 result: nothing was rounded?"
    # Hotline on the half-width file against ONNX Runtime on the same file: fp32 arithmetic on the
    # same weights, so only summation order differs (measured 5e-7 to 6e-7, against 1e-3 to 9e-3
    # for the half-width rounding).
    diff = maxdiff(ours, theirs)
    assert diff < 1e-4 and diff < rounding / 10, (diff, rounding)
    print(f"{name} bf16={bf16}: hotline vs ORT {diff:.2e}, half vs fp32 weights {rounding:.2e}")
