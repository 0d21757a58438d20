#!/usr/bin/env python3
"""Error analysis of an exported model on a labelled split: false-positive / false-negative spans
by slot type and by template, boundary errors, intent confusions.

    python3 training/diagnose.py --model models/default --data data/hotline --split dev \
        [--trace data/hotline/dev.trace] [--examples 40]

--trace: the file written by `generate.py --trace` (the template behind each line); without it
errors are grouped by slot type only. Uses onnxruntime and the tokenisation of common.py.
"""
import argparse
import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Encoder, Taxonomy, decode_spans, metrics, read_jsonl  # noqa: E402


def run_model(model_dir, rows, tax, batch=64, vocab=None):
    """model_dir: an exported model folder (model.onnx, ONNX Runtime) or a training run folder
    (config.json + weights, PyTorch; vocab then defaults to models/default/vocab.txt)."""
    run = os.path.exists(os.path.join(model_dir, "config.json"))
    vocab = vocab or os.path.join(model_dir if not run else "models/default", "vocab.txt")
    enc = Encoder(vocab, tax)
    if run:
        import torch
        from export import load_run
        model, _ = load_run(model_dir)
        model.eval()

        def infer(ids, mask, tt):
            with torch.no_grad():
                il, sl = model(*(torch.from_numpy(a) for a in (ids, mask, tt)))
            return il.numpy(), sl.numpy()
    else:
        import onnxruntime as ort
        sess = ort.InferenceSession(os.path.join(model_dir, "model.onnx"),
                                    providers=["CPUExecutionProvider"])

        def infer(ids, mask, tt):
            return sess.run(None, {"input_ids": ids, "attention_mask": mask,
                                   "token_type_ids": tt})
    exs = [enc.encode(r) for r in rows]
    intents, spans = [None] * len(exs), [None] * len(exs)
    order = sorted(range(len(exs)), key=lambda i: len(exs[i]["ids"]))
    for b in range(0, len(order), batch):
        idx = order[b:b + batch]
        n = max(len(exs[i]["ids"]) for i in idx)
        ids = np.zeros((len(idx), n), np.int64)
        for k, i in enumerate(idx):
            ids[k, :len(exs[i]["ids"])] = exs[i]["ids"]
        il, sl = infer(ids, (ids != 0).astype(np.int64), np.zeros_like(ids))
        for k, i in enumerate(idx):
            intents[i] = int(il[k].argmax())
            tags = sl[k, :len(exs[i]["ids"])].argmax(-1).tolist()
            spans[i] = decode_spans(tags, exs[i]["offsets"], tax.tags, exs[i]["text"])
    return exs, intents, spans


def classify(g, p):
    """Error class of a predicted span p against the gold spans g of the same utterance."""
    for t, a, b in g:
        if (t, a, b) == p:
            return "ok"
    for t, a, b in g:
        if a < p[2] and p[1] < b:
            return "boundary" if t == p[0] else "type"
    return "spurious"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="models/default",
                    help="exported model folder (ONNX) or training run folder (PyTorch)")
    ap.add_argument("--vocab", help="vocab.txt (default: the model folder's, or models/default's)")
    ap.add_argument("--data", default="data/hotline")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--trace")
    ap.add_argument("--examples", type=int, default=30)
    args = ap.parse_args(argv)
    tax = Taxonomy()
    path = args.split if args.split.endswith(".jsonl") else os.path.join(args.data, args.split + ".jsonl")
    rows = read_jsonl(path)
    trace = None
    if args.trace:
        with open(args.trace, encoding="utf-8") as f:
            trace = [l.strip() for l in f]
    exs, ipred, spred = run_model(args.model, rows, tax, vocab=args.vocab)
    gold = [ex["spans"] for ex in exs]
    m = metrics([ex["intent"] for ex in exs], ipred, gold, spred, tax.intents)
    print(f"{path}: n={m['n']} intent {m['intent_accuracy']:.4f} slot P {m['slot_precision']:.4f} "
          f"R {m['slot_recall']:.4f} F1 {m['slot_f1']:.4f}")
    by_type = collections.defaultdict(collections.Counter)
    by_tpl = collections.defaultdict(collections.Counter)
    samples = collections.defaultdict(list)
    for i, (g, p) in enumerate(zip(gold, spred)):
        gs, ps = set(g), set(p)
        tpl = trace[i] if trace else "-"
        text = rows[i]["text"]
        for s in ps:
            c = classify(g, s)
            if c == "ok":
                by_type[s[0]]["tp"] += 1
            else:
                by_type[s[0]]["fp_" + c] += 1
                by_tpl[tpl]["fp"] += 1
                samples[(s[0], "fp_" + c)].append((tpl, text, text[s[1]:s[2]], g))
        for s in gs - ps:
            by_type[s[0]]["fn"] += 1
            by_tpl[tpl]["fn"] += 1
            samples[(s[0], "fn")].append((tpl, text, text[s[1]:s[2]], p))
        if trace:
            by_tpl[tpl]["n"] += 1
    print("\nby text length (characters): lines, intent accuracy, slot P / R / F1")
    for lo, hi in ((0, 15), (15, 30), (30, 60), (60, 1000)):
        idx = [i for i, r in enumerate(rows) if lo <= len(r["text"]) < hi]
        if idx:
            b = metrics([exs[i]["intent"] for i in idx], [ipred[i] for i in idx],
                        [gold[i] for i in idx], [spred[i] for i in idx], tax.intents)
            print(f"  {lo:3d}-{hi:<4d} n {len(idx):4d}  intent {b['intent_accuracy']:.3f}  slot P "
                  f"{b['slot_precision']:.3f} R {b['slot_recall']:.3f} F1 {b['slot_f1']:.3f}")
    print("\nby slot type: tp, fp (spurious / boundary / type), fn")
    for t in tax.slots:
        c = by_type[t]
        print(f"  {t:14s} tp {c['tp']:4d}  fp_spurious {c['fp_spurious']:4d}  fp_boundary "
              f"{c['fp_boundary']:4d}  fp_type {c['fp_type']:4d}  fn {c['fn']:4d}")
    if trace:
        print("\ntemplates with the most span errors (fp+fn, n lines):")
        for tpl, c in sorted(by_tpl.items(), key=lambda kv: -(kv[1]["fp"] + kv[1]["fn"]))[:40]:
            print(f"  {tpl:45s} n {c['n']:3d} fp {c['fp']:3d} fn {c['fn']:3d}")
    print("\nintent confusions (gold -> predicted: count):")
    conf = collections.Counter((tax.intents[ex["intent"]], tax.intents[p])
                               for ex, p in zip(exs, ipred) if ex["intent"] != p)
    for (g, p), n in conf.most_common(40):
        print(f"  {g:26s} -> {p:26s} {n}")
    if trace:
        print("\nintent errors by template (template: gold -> predicted x count, one example):")
        err = collections.defaultdict(list)
        for i, (ex, p) in enumerate(zip(exs, ipred)):
            if ex["intent"] != p:
                err[trace[i]].append((tax.intents[p], rows[i]["text"]))
        lines_per_tpl = collections.Counter(trace)
        for tpl, lst in sorted(err.items(), key=lambda kv: -len(kv[1])):
            preds = collections.Counter(p for p, _ in lst)
            gold_intent = rows[trace.index(tpl)]["intent"]
            print(f"  {tpl:45s} {len(lst)}/{lines_per_tpl[tpl]} {gold_intent} -> "
                  f"{dict(preds)}  e.g. {lst[0][1]}")
    print("\nexamples per error class:")
    for key in sorted(samples):
        print(f"--- {key[0]} {key[1]} ({len(samples[key])})")
        for tpl, text, val, other in samples[key][:args.examples]:
            print(f"  [{val}] {text}   <{tpl}> {[(t, text[a:b]) for t, a, b in other]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
