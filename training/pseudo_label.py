#!/usr/bin/env python3
"""Align a city's labelled work orders with the hotline taxonomy's intents, so that real text
(operators' summaries, citizens' posts) can join the joint model's training set.

A city's orders name the department that handled them, in the city's own words, not our intent.
This script runs a model folder over the orders and, for each of the city's department labels,
finds the taxonomy department its orders are most often predicted to (the label's "mapped"
department, kept when at least --min-share of its orders agree). Each order of a mapped label
then gets the most probable intent *of that department*: the model picks the intent, the city's
own routing picks the department. Orders of unmapped labels, and orders whose best intent of the
mapped department is improbable (< --min-prob), are left out.

  python3 training/pseudo_label.py --model models/default --orders ORDERS.jsonl \\
      --out build-train/extra.jsonl [--report build-train/extra_report.json]

ORDERS.jsonl: {"text": ..., "label": <department as the city names it>} per line (PII masked).
OUT: {"text", "intent", "slots": null} per line; slots null means "not labelled", which the
trainer leaves out of the slot loss (common.Encoder).
"""
import argparse
import collections
import json
import os
import random
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Encoder, Taxonomy, read_jsonl  # noqa: E402

# The operator's opening formula ("市民来电反映：") says nothing about the matter; it is dropped
# from half of the texts so that the model does not come to rely on it.
PREFIX = re.compile(r"^\s*(市民|来电人|群众|网友)?(来电|来信|留言|微信|公众号|网上)?"
                    r"(反映|咨询|投诉|求助|建议|举报|称)[：:，,]?\s*")
# The operator's instructions to the department ("请市城管局核实处理！", "（请职能局在规定时间内
# 到场处理）") name the answer; a caller or a post does not say them. Removed from every text.
OPERATOR = [re.compile(r"[（(]\s*请职能局[^）)]*[）)]?"),
            re.compile(r"[，,。！!]?\s*请[^。！!，,（(]{0,24}?(核实|核查|调查|协调|跟进)[^。！!（(]{0,12}"
                       r"[。！!]?")]


def clean_text(text):
    for pat in OPERATOR:
        text = pat.sub("", text)
    return text.strip()


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def align(probs, labels, intent_dept, eligible, min_share=0.4, min_count=5, min_prob=0.05,
          overrides=None):
    """probs [n, I]; labels: the city's department label per order; intent_dept: taxonomy
    department per intent; eligible: bool per intent (dialog acts and out-of-scope are not);
    overrides: {label: department or None} set by hand, replacing the vote.
    Returns (intent index or -1 per order, {label: {dept, share, n}})."""
    overrides = overrides or {}
    probs = np.where(np.asarray(eligible)[None, :], probs, 0.0)
    top = probs.argmax(1)
    by_label = collections.defaultdict(list)
    for i, lab in enumerate(labels):
        by_label[lab].append(i)
    mapping, out = {}, np.full(len(labels), -1)
    depts = np.asarray(intent_dept)
    for lab, idx in by_label.items():
        votes = collections.Counter(intent_dept[top[i]] for i in idx)
        dept, n = votes.most_common(1)[0]
        share = n / len(idx)
        mapping[lab] = {"dept": dept, "share": round(share, 3), "n": len(idx)}
        if lab in overrides:
            dept = mapping[lab]["dept"] = overrides[lab]
            mapping[lab]["share"] = round(votes[dept] / len(idx), 3) if dept else 0.0
            mapping[lab]["by_hand"] = True
            if dept is None:
                continue
        elif share < min_share or len(idx) < min_count:
            mapping[lab]["dept"] = None
            continue
        in_dept = depts == dept
        for i in idx:
            p = np.where(in_dept, probs[i], -1.0)
            k = int(p.argmax())
            if p[k] >= min_prob:
                out[i] = k
    return out, mapping


def run_model(model_dir, texts, batch=64):
    import onnxruntime as ort
    import yaml
    with open(os.path.join(model_dir, "model.yaml"), encoding="utf-8") as f:
        my = yaml.safe_load(f)
    tax = Taxonomy(os.path.join(model_dir, my["files"].get("taxonomy", "taxonomy.yaml")))
    enc = Encoder(os.path.join(model_dir, my["tokenizer"]["vocab"]), tax, my.get("max_length", 128))
    sess = ort.InferenceSession(os.path.join(model_dir, my["files"]["onnx"]),
                                providers=["CPUExecutionProvider"])
    from export import batches  # the export's padding, for ONNX Runtime
    exs = [{"ids": enc.tokenize(t)[0], "i": i} for i, t in enumerate(texts)]
    exs.sort(key=lambda e: len(e["ids"]))  # similar lengths together: less padding
    logits = np.zeros((len(exs), len(tax.intents)), np.float32)
    for chunk, ids, mask, tt in batches(exs, enc.pad_id, batch):
        out = sess.run([my["outputs"]["intent"]], {"input_ids": ids, "attention_mask": mask,
                                                    "token_type_ids": tt})[0]
        logits[[e["i"] for e in chunk]] = out
    return tax, logits


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model folder (joint intent+slot model)")
    ap.add_argument("--orders", required=True, nargs="+", help="orders .jsonl (text, label)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--report")
    ap.add_argument("--min-share", type=float, default=0.4)
    ap.add_argument("--min-prob", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--map", help="JSON {city label: taxonomy department id or null}: fixes the "
                    "mapping where the model's vote is wrong or the label is too broad")
    a = ap.parse_args(argv)
    rows = [r for p in a.orders for r in read_jsonl(p) if r.get("text") and r.get("label")]
    if not rows:
        sys.exit("pseudo_label: no orders with text and label")
    overrides = {}
    if a.map:
        with open(a.map, encoding="utf-8") as f:
            overrides = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    tax, logits = run_model(a.model, [r["text"] for r in rows])
    doc = {i["id"]: i for i in tax.doc["intents"]}
    intent_dept = [doc[i].get("dept") for i in tax.intents]
    eligible = [doc[i].get("kind") in ("answer", "dispatch") and i != "out_of_scope"
                for i in tax.intents]
    known = set(intent_dept)
    for lab, dept in overrides.items():
        if dept is not None and dept not in known:
            sys.exit(f"pseudo_label: --map {a.map}: {lab!r} -> {dept!r} is no department of an intent")
    picked, mapping = align(softmax(logits), [r["label"] for r in rows], intent_dept, eligible,
                            a.min_share, min_prob=a.min_prob, overrides=overrides)
    rng = random.Random(a.seed)
    n = 0
    per_intent = collections.Counter()
    with open(a.out, "w", encoding="utf-8") as f:
        for r, k in zip(rows, picked):
            if k < 0:
                continue
            text = clean_text(r["text"]) or r["text"]
            if rng.random() < 0.5:
                text = PREFIX.sub("", text, count=1) or text
            f.write(json.dumps({"text": text, "intent": tax.intents[k], "slots": None},
                               ensure_ascii=False) + "\n")
            per_intent[tax.intents[k]] += 1
            n += 1
    mapped = sum(1 for m in mapping.values() if m["dept"])
    print(f"{n} of {len(rows)} orders kept; {mapped} of {len(mapping)} labels mapped; "
          f"{len(per_intent)} intents covered")
    if a.report:
        with open(a.report, "w", encoding="utf-8") as f:
            json.dump({"kept": n, "orders": len(rows), "labels": mapping,
                       "per_intent": dict(per_intent.most_common())}, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
