#!/usr/bin/env python3
"""Whole-model parity of a Hotline plan (e.g. CUDA FP16) against PyTorch FP32 (issue 6's proof):
logits' relative error <= --tol and the same intent on N random inputs.

    python3 bench/cuda/parity.py --model-dir DIR --plan PLAN --hotline "/tmp/hl/run hotline"
        [--reference torch|onnx] [--n 1000] [--chunk 250] [--tol 1e-2] [--out parity.json]
        [--precision fp8 --min-agree 0.995]

--reference torch (default): DIR is a folder from make_serve_model.py (model.pt + the size in
model.yaml's name), run by PyTorch. --reference onnx: any model folder (e.g. the trained
models/default); DIR/model.onnx run by ONNX Runtime's CPU provider in FP32. The inputs
are N sequences of random length 8..128 (ids uniform over the vocabulary past the first 672,
[CLS] first and [SEP] last, token types 0); PyTorch runs them in FP32 on the GPU with TF32 off,
padded with the attention mask; Hotline runs the same padded batches through `hotline infer`.
Relative error = max |ours - ref| / max |ref| over every real (unpadded) position of an output.
Intent agreement is argmax equality; disagreements are listed with the FP32 top-2 margin so a
near-tie is told from a real error. Prints one JSON line; exit 0 when both criteria hold, 1 else.
Quantised plans (--precision fp8|int8, a label): pass when the intent agreement is at least
--min-agree (PERFORMANCE.md A2: 0.995) and the relative errors are within --tol.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_serve_model as msm  # noqa: E402


def make_inputs(n, vocab, seed=20261201, min_len=8, max_len=128):
    rng = np.random.default_rng(seed)
    lens = rng.integers(min_len, max_len + 1, size=n)
    seqs = []
    for L in lens:
        ids = rng.integers(672, vocab, size=L)
        ids[0], ids[-1] = 101, 102
        seqs.append(ids.astype(np.int64))
    return seqs


def text_inputs(path, vocab_path, n, max_len=128):
    """Real call text (JSONL {"text": ...}) as token ids: [CLS] + one token per character (the
    vocabulary's entry for the character, lower-cased, else [UNK]; spaces dropped) + [SEP]: how
    BERT-Chinese WordPiece splits CJK text, close enough for Latin/digit runs in a parity check."""
    vocab = {}
    for i, line in enumerate(open(vocab_path, encoding="utf-8")):
        vocab.setdefault(line.rstrip("\n"), i)
    unk, cls, sep = vocab.get("[UNK]", 100), vocab.get("[CLS]", 101), vocab.get("[SEP]", 102)
    seqs = []
    for line in open(path, encoding="utf-8"):
        if len(seqs) >= n:
            break
        text = json.loads(line)["text"]
        ids = [vocab.get(c.lower(), unk) for c in text if not c.isspace()][:max_len - 2]
        seqs.append(np.asarray([cls] + ids + [sep], np.int64))
    return seqs


def pad(seqs):
    S = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), S), np.int64)
    mask = np.zeros((len(seqs), S), np.int64)
    for r, s in enumerate(seqs):
        ids[r, :len(s)] = s
        mask[r, :len(s)] = 1
    return ids, mask, np.zeros_like(ids)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--hotline", required=True, help="command that runs the hotline binary")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--chunk", type=int, default=250)
    ap.add_argument("--tol", type=float, default=1e-2)
    ap.add_argument("--reference", default="torch", choices=["torch", "onnx"])
    ap.add_argument("--out")
    ap.add_argument("--precision", default="fp16", help="the plan's precision (a label)")
    ap.add_argument("--texts", help="JSONL of real call text (the first --n lines) instead of "
                    "random token ids")
    ap.add_argument("--min-agree", type=float, default=1.0,
                    help="share of inputs whose intent must agree (1.0: all)")
    a = ap.parse_args()
    t0 = time.time()
    vocab = msm.count_vocab(os.path.join(a.model_dir, "vocab.txt"))
    if a.reference == "torch":
        size = None
        for line in open(os.path.join(a.model_dir, "model.yaml"), encoding="utf-8"):
            if line.startswith("name:"):
                size = line.split(":", 1)[1].strip()
        model = msm.build(size, a.model_dir)
        model.load_state_dict(torch.load(os.path.join(a.model_dir, "model.pt"),
                                         map_location="cpu"))
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model = model.to(dev).float().eval()
        ref_name = f"pytorch {torch.__version__} fp32 on {dev}"

        def reference(ids, mask, tt):
            with torch.inference_mode():
                ri, rs = model(torch.from_numpy(ids).to(dev), torch.from_numpy(mask).to(dev),
                               torch.from_numpy(tt).to(dev))
            return ri.double().cpu().numpy(), rs.double().cpu().numpy()
    else:
        import onnxruntime as ort
        sess = ort.InferenceSession(os.path.join(a.model_dir, "model.onnx"),
                                    providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        ref_name = f"onnxruntime {ort.__version__} fp32 cpu"

        def reference(ids, mask, tt):
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}
            ri, rs = sess.run(["intent_logits", "slot_logits"],
                              {k: v for k, v in feed.items() if k in names})
            return ri.astype(np.float64), rs.astype(np.float64)
    if a.texts:
        seqs = text_inputs(a.texts, os.path.join(a.model_dir, "vocab.txt"), a.n)
        a.n = len(seqs)
    else:
        seqs = make_inputs(a.n, vocab)

    worst = {"intent_logits": [0.0, 0.0], "slot_logits": [0.0, 0.0]}  # max diff, max |ref|
    agree, slot_agree, slot_total, disagreements = 0, 0, 0, []
    tmp = tempfile.mkdtemp()
    infer_s = 0.0
    for c0 in range(0, a.n, a.chunk):
        chunk = seqs[c0:c0 + a.chunk]
        ids, mask, tt = pad(chunk)
        ri, rs = reference(ids, mask, tt)
        inp, outp = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
        json.dump({"input_ids": ids.tolist(), "attention_mask": mask.tolist(),
                   "token_type_ids": tt.tolist()}, open(inp, "w"))
        t1 = time.time()
        subprocess.run(shlex.split(a.hotline) + ["infer", "--plan", a.plan, "--input", inp,
                                                 "--output", outp], check=True)
        infer_s += time.time() - t1
        got = json.load(open(outp))
        oi = np.asarray(got["intent_logits"], np.float64)
        osl = np.asarray(got["slot_logits"], np.float64)
        assert oi.shape == ri.shape, (oi.shape, ri.shape)
        assert osl.shape == rs.shape, (osl.shape, rs.shape)
        valid = mask.astype(bool)
        for name, o, r in (("intent_logits", oi, ri), ("slot_logits", osl[valid], rs[valid])):
            worst[name][0] = max(worst[name][0], float(np.abs(o - r).max()))
            worst[name][1] = max(worst[name][1], float(np.abs(r).max()))
        a_ours, a_ref = oi.argmax(1), ri.argmax(1)
        agree += int((a_ours == a_ref).sum())
        for k in np.nonzero(a_ours != a_ref)[0]:
            top2 = np.sort(ri[k])[-2:]
            disagreements.append({"index": c0 + int(k), "len": int(len(chunk[k])),
                                  "ref": int(a_ref[k]), "ours": int(a_ours[k]),
                                  "ref_top2_margin": float(top2[1] - top2[0])})
        slot_agree += int((osl.argmax(-1)[valid] == rs.argmax(-1)[valid]).sum())
        slot_total += int(valid.sum())
    rel = {k: v[0] / max(v[1], 1e-12) for k, v in worst.items()}
    ok = all(v <= a.tol for v in rel.values()) and agree >= a.min_agree * a.n - 1e-9
    res = {"n": a.n, "plan": a.plan, "reference": ref_name, "precision": a.precision,
           "inputs": a.texts or "random token ids",
           "min_agree": a.min_agree,
           "rel_err": rel, "max_abs_err": {k: v[0] for k, v in worst.items()},
           "intent_agree": agree, "slot_argmax_agree": slot_agree / max(1, slot_total),
           "disagreements": disagreements[:20], "tol": a.tol, "pass": ok,
           "infer_s": round(infer_s, 1), "seconds": round(time.time() - t0, 1)}
    print(json.dumps(res))
    if a.out:
        json.dump(res, open(a.out, "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
