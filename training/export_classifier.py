"""Export a dispatcher run (training/train_classifier.py) to a model folder of kind `classifier`.

  python3 training/export_classifier.py --run RUN --vocab build-train/corpus/vocab.txt \
      --data build-train/corpus/haikou --out models/haikou --name haikou

Writes OUT/{model.onnx, vocab.txt, labels.json, model.yaml, metrics.json, weights_map.json}
(weights_map.json: where each encoder weight sits in model.onnx, so that a city's own training
can start from this folder: train_classifier.py --init-model). model.onnx: inputs
input_ids / attention_mask / token_type_ids (int64 [batch, seq]), outputs department_logits and
category_logits, weights stored as FP16 (training/onnx_fp16.py). ONNX Runtime is checked against
PyTorch (the same FP16-rounded weights) on every test line; the figures in metrics.json are ONNX
Runtime's.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calibration import ece, softmax  # noqa: E402
from common import read_jsonl  # noqa: E402
from model import read_weight_arrays  # noqa: E402
from onnx_fp16 import round_state_dict_fp16, store_fp16, weight_map  # noqa: E402
from train_classifier import Classifier, Tok, category_of  # noqa: E402

MAX_ONNX_BYTES = 16 * 10**6
ATOL = 2e-3


def load_run(run):
    with open(os.path.join(run, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    model = Classifier(cfg["vocab_size"], cfg["heads"], cfg["layers"], cfg["hidden"],
                       cfg["n_heads"], cfg["ffn"], dropout=0.0)
    sd = {k: torch.from_numpy(v) for k, v in read_weight_arrays(run).items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.startswith("bert.mlm_")]
    if missing or unexpected:
        raise ValueError(f"{run}: weights do not fit: missing {missing}, unexpected {unexpected}")
    model.eval()
    return model, cfg


def export(model, path):
    ids = torch.tensor([[2, 10, 11, 12, 3], [2, 13, 3, 0, 0]], dtype=torch.long)
    mask = (ids != 0).long()
    names = [f"{h}_logits" for h in model.head_names]
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
           "token_type_ids": {0: "batch", 1: "seq"}, **{n: {0: "batch"} for n in names}}
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask, torch.zeros_like(ids)), path, opset_version=14,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=names, dynamic_axes=dyn, do_constant_folding=True)
    return names


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--data", required=True, help="folder with test.jsonl (and dev.jsonl)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="haikou")
    ap.add_argument("--max-lines", type=int)
    a = ap.parse_args(argv)
    model, cfg = load_run(a.run)
    round_state_dict_fp16(model)
    os.makedirs(a.out, exist_ok=True)
    shutil.copyfile(a.vocab, os.path.join(a.out, "vocab.txt"))
    onnx_path = os.path.join(a.out, "model.onnx")
    names = export(model, onnx_path)
    store_fp16(onnx_path)
    size = os.path.getsize(onnx_path)
    wmap = weight_map(model.state_dict(), onnx_path, prefix="bert.")
    with open(os.path.join(a.out, "weights_map.json"), "w", encoding="utf-8") as f:
        json.dump({"encoder": {k: cfg[k] for k in ("layers", "hidden", "ffn")} |
                   {"heads": cfg["n_heads"]}, "weights": wmap}, f, indent=0)
    if size > MAX_ONNX_BYTES:
        raise ValueError(f"{onnx_path} is {size} bytes, expected at most {MAX_ONNX_BYTES}")
    labels = cfg["labels"]
    with open(os.path.join(a.out, "labels.json"), "w", encoding="utf-8") as f:
        json.dump({h: labels[h] for h in model.head_names}, f, ensure_ascii=False, indent=1)
        f.write("\n")

    import onnxruntime as ort
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    tok = Tok(os.path.join(a.out, "vocab.txt"), cfg["max_length"])
    report = {"onnx_bytes": size}
    for split in ("dev", "test"):
        path = os.path.join(a.data, split + ".jsonl")
        if not os.path.exists(path):
            continue
        rows = read_jsonl(path)[:a.max_lines]
        seqs = tok([r["text"] for r in rows])
        outs = {n: [] for n in names}
        max_abs, mism = 0.0, 0
        for b in range(0, len(seqs), 32):
            chunk = seqs[b:b + 32]
            n = max(map(len, chunk))
            ids = np.zeros((len(chunk), n), np.int64)
            mask = np.zeros_like(ids)
            for i, s in enumerate(chunk):
                ids[i, :len(s)] = s
                mask[i, :len(s)] = 1
            got = sess.run(names, {"input_ids": ids, "attention_mask": mask,
                                   "token_type_ids": np.zeros_like(ids)})
            with torch.no_grad():
                ref = model(torch.from_numpy(ids), torch.from_numpy(mask),
                            torch.zeros(ids.shape, dtype=torch.long))
            for n_, g, r in zip(names, got, ref):
                r = r.numpy()
                max_abs = max(max_abs, float(np.abs(g - r).max()))
                mism += int((g.argmax(1) != r.argmax(1)).sum())
                outs[n_].append(g)
        if max_abs > ATOL or mism:
            raise AssertionError(f"ONNX Runtime and PyTorch disagree on {split}: max |diff| "
                                 f"{max_abs}, {mism} argmax mismatches")
        res = {"n": len(rows), "parity_max_abs": max_abs}
        for h, n_ in zip(model.head_names, names):
            lg = np.concatenate(outs[n_])
            idx = {k: i for i, k in enumerate(labels[h])}
            gold = np.asarray([idx.get(r["label"] if h == "department" else category_of(r), -1)
                               for r in rows])
            top = np.argsort(-lg, 1)
            t = cfg["temperature"][h]
            res[h] = {"top1": float((top[:, 0] == gold).mean()),
                      "top3": float((top[:, :3] == gold[:, None]).any(1).mean()),
                      "ece": ece(softmax(lg), gold), "ece_calibrated": ece(softmax(lg, t), gold),
                      "unseen_labels": int((gold < 0).sum())}
            if h == "category":
                pred1 = np.asarray([labels[h][p].split("/")[0] for p in top[:, 0]])
                gold1 = np.asarray([(category_of(r) or "").split("/")[0] for r in rows])
                res["category_level1"] = float((pred1 == gold1).mean())
        report[split] = res
        print(f"{split}: " + json.dumps(res, ensure_ascii=False))
    temps = cfg["temperature"]
    yaml_text = "\n".join([
        f"name: {a.name}",
        'version: "1"',
        "kind: classifier",
        f"max_length: {cfg['max_length']}",
        "long_text: head_tail",
        "precision: fp32",
        "tokenizer: {vocab: vocab.txt, lowercase: true, normalize_width: true}",
        "files: {onnx: model.onnx, labels: labels.json}",
        "outputs: {" + ", ".join(f"{h}: {h}_logits" for h in model.head_names) + "}",
        "calibration: {temperature: {" + ", ".join(f"{h}: {temps[h]:.4f}"
                                                   for h in model.head_names) + "}}",
        f'profile: "1x1:8x128:32x{cfg["max_length"]}"',
        ""])
    with open(os.path.join(a.out, "model.yaml"), "w", encoding="utf-8") as f:
        f.write(yaml_text)
    with open(os.path.join(a.out, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, ensure_ascii=False, indent=1)
    print(f"wrote {a.out}: model.onnx {size} bytes")
    return report


if __name__ == "__main__":
    main()
