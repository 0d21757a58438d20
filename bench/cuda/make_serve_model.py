#!/usr/bin/env python3
"""A BERT-base-sized model folder for `hotline serve` on the GPU (PERFORMANCE.md S2) and for the
whole-model parity check (parity.py).

    python3 bench/cuda/make_serve_model.py --out DIR [--size base] [--from models/default]
        [--max-batch 256] [--instances 4] [--delay-ms 2]

The folder's vocabulary, labels and taxonomy are the default model's (so the NLU pipeline and
`hotline bench` texts work unchanged); the network is bench/make_models.py's BertJoint of the
given size with that vocabulary and those label counts, random weights from a fixed seed
(speed does not depend on the values). Writes DIR/model.onnx (opset 17, TorchScript exporter),
DIR/model.pt (state dict, for PyTorch references), vocab.txt, labels.json, taxonomy.yaml and a
model.yaml with the batching settings. Prints one JSON line.
"""
import argparse
import json
import os
import shutil
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import make_models as mm  # noqa: E402


def count_vocab(path):
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def configure(src):
    """Points make_models' module constants at the source folder's vocabulary and labels."""
    labels = json.load(open(os.path.join(src, "labels.json"), encoding="utf-8"))
    mm.VOCAB = count_vocab(os.path.join(src, "vocab.txt"))
    mm.N_INTENTS = len(labels["intents"])
    mm.N_SLOTS = len(labels["slot_tags"])
    return mm.VOCAB, mm.N_INTENTS, mm.N_SLOTS


def build(size, src, seed=1234):
    configure(src)
    return mm.build(size, seed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", default="base", choices=sorted(mm.CONFIGS))
    ap.add_argument("--from", dest="src", default=os.path.join(HERE, "..", "..", "models",
                                                               "default"))
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--delay-ms", type=float, default=2)
    a = ap.parse_args()
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    for f in ("vocab.txt", "labels.json", "taxonomy.yaml"):
        shutil.copy(os.path.join(a.src, f), os.path.join(a.out, f))
    vocab, n_int, n_slot = configure(a.src)
    model = mm.build(a.size)
    torch.save(model.state_dict(), os.path.join(a.out, "model.pt"))
    gen = torch.Generator().manual_seed(7)
    ids, mask, tt = mm.random_batch(2, 24, gen, pad_tail=True)
    ids.clamp_(max=vocab - 1)
    mm.export_onnx(model, (ids, mask, tt), os.path.join(a.out, "model.onnx"), 17)
    with open(os.path.join(a.out, "model.yaml"), "w", encoding="utf-8") as f:
        f.write(f"""name: {a.size}
version: "1"
max_length: 128
precision: fp16
tokenizer: {{vocab: vocab.txt, lowercase: true, normalize_width: true}}
files: {{onnx: model.onnx, labels: labels.json, taxonomy: taxonomy.yaml}}
outputs: {{intent: intent_logits, slots: slot_logits}}
profile: "1x1:32x64:{a.max_batch}x128"
batching: {{max_batch_size: {a.max_batch}, max_batch_tokens: {a.max_batch * 64},
           max_queue_delay_ms: {a.delay_ms}, max_queue_size: 8192}}
instances: {a.instances}
warmup: true
""")
    print(json.dumps({"size": a.size, **mm.CONFIGS[a.size], "vocab": vocab, "intents": n_int,
                      "slot_tags": n_slot, "onnx_bytes": os.path.getsize(
                          os.path.join(a.out, "model.onnx")),
                      "seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
