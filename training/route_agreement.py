#!/usr/bin/env python3
"""How often a joint model routes a city's real orders as the city did: the share of orders whose
predicted intent belongs to the department the order's label maps to (and to one of that
department's categories). The mapping is pseudo_label.py's report (votes) with --map's hand
entries on top; orders of unmapped labels are left out. bench/RESULTS.md's Haikou agreement
figures come from this script.

  python3 training/route_agreement.py --report build-train/haikou_extra_report.json \\
      --map training/maps/haikou_departments.json --orders build-train/corpus/haikou/test.jsonl \\
      --vocab build-train/corpus/vocab.txt RUN [RUN ...]
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Encoder, Taxonomy, read_jsonl  # noqa: E402
from export import batches, load_run  # noqa: E402
from pseudo_label import clean_text  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="joint training run folders")
    ap.add_argument("--report", required=True, help="pseudo_label.py --report output")
    ap.add_argument("--map", help="hand mapping JSON (as pseudo_label.py --map)")
    ap.add_argument("--orders", required=True, help="held-out orders (text, label)")
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--taxonomy", default=None)
    a = ap.parse_args(argv)
    tax = Taxonomy(a.taxonomy) if a.taxonomy else Taxonomy()
    doc = {i["id"]: i for i in tax.doc["intents"]}
    with open(a.report, encoding="utf-8") as f:
        mapping = {k: v["dept"] for k, v in json.load(f)["labels"].items()}
    if a.map:
        with open(a.map, encoding="utf-8") as f:
            mapping.update({k: v for k, v in json.load(f).items() if not k.startswith("_")})
    rows = [r for r in read_jsonl(a.orders) if mapping.get(r.get("label"))]
    cats = {}
    for i in tax.doc["intents"]:
        cats.setdefault(i.get("dept"), set()).add(i["category"])
    enc = Encoder(a.vocab, tax, 128)
    exs = [{"ids": enc.tokenize(clean_text(r["text"]) or r["text"])[0], "i": i}
           for i, r in enumerate(rows)]
    exs.sort(key=lambda e: len(e["ids"]))
    for run in a.runs:
        model, _ = load_run(run)
        pred = np.zeros(len(rows), np.int64)
        with torch.no_grad():
            for chunk, ids, mask, tt in batches(exs, enc.pad_id, 64):
                il, _ = model(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(tt))
                pred[[e["i"] for e in chunk]] = il.argmax(-1).numpy()
        intents = [doc[tax.intents[k]] for k in pred]
        dept = np.mean([i.get("dept") == mapping[r["label"]] for i, r in zip(intents, rows)])
        cat = np.mean([i["category"] in cats.get(mapping[r["label"]], ()) for i, r in
                       zip(intents, rows)])
        other = np.mean([i["id"] == "out_of_scope" or i.get("kind") == "dialog" for i in intents])
        print(f"{run}: {len(rows)} orders; department agrees {dept:.4f}, category {cat:.4f}, "
              f"out of scope or dialog act {other:.4f}")


if __name__ == "__main__":
    main()
