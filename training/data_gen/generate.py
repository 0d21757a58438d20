#!/usr/bin/env python3
"""Generates data/hotline/{train,dev,test,calib}.jsonl from training/data_gen/templates/.

Deterministic: every (intent, split) draws from its own random.Random seeded from --seed and the
intent id, so editing one intent's templates leaves the others' data unchanged (except where a
new text happens to duplicate one of theirs).
dev/test come only from `## heldout` templates (odd-numbered ones to dev, even ones to test),
train and calib only from `## train` templates; duplicate texts (ignoring punctuation and
spaces) are removed across all splits (test first, then dev, train, calib). Usage:
    python3 training/data_gen/generate.py --out data/hotline
"""
import argparse
import glob
import json
import os
import random
import sys
import re
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import augment  # noqa: E402
import autolabel  # noqa: E402
import template  # noqa: E402
from taxonomy import REPO_ROOT, Taxonomy  # noqa: E402

TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


_NORM_RE = re.compile(r"[\s，。？！、；：,.?!;:…~]+")


def dedup_key(text):
    """Texts that differ only in punctuation or spacing count as the same utterance."""
    return _NORM_RE.sub("", text)


def split_rng(seed, intent, split):
    return random.Random(zlib.crc32(f"{seed}:{intent}:{split}".encode("utf-8")))


def fill(templates, n, rng, kind, seen, products=False, max_tries_per_item=40):
    """Up to n unique examples, cycling over templates in a shuffled order each round."""
    out = []
    if not templates:
        return out
    order = []
    tries = 0
    while len(out) < n and tries < n * max_tries_per_item:
        if not order:
            order = list(range(len(templates)))
            rng.shuffle(order)
        where, nodes, _ = templates[order.pop()]
        tries += 1
        segs = augment.augment(template.expand(nodes, rng), rng, kind)
        ex = augment.to_example(autolabel.label_segments(segs, products))
        ex["where"] = os.path.relpath(where, os.path.dirname(TEMPLATE_DIR))
        key = dedup_key(ex["text"])
        if not key or key in seen:
            continue
        seen.add(key)
        out.append(ex)
    return out


def generate(args):
    tax = Taxonomy(args.taxonomy)
    files = sorted(glob.glob(os.path.join(args.templates, "*.txt")))
    by_intent = {}
    for path in files:
        tf = template.TemplateFile(path)
        if tf.intent not in tax.intent_by_id:
            raise SystemExit(f"{path}: file name is not an intent id in {tax.path}")
        by_intent[tf.intent] = tf
    missing = [i for i in tax.intent_ids if i not in by_intent]
    if missing:
        print(f"warning: no templates for {len(missing)} intents: {', '.join(missing)}",
              file=sys.stderr)
    seen = set()
    splits = {"train": [], "dev": [], "test": [], "calib": []}
    table = []
    for intent in tax.intent_ids:
        tf = by_intent.get(intent)
        if tf is None:
            continue
        kind = tax.intent_by_id[intent]["kind"]
        heldout_dev, heldout_test = tf.heldout[0::2], tf.heldout[1::2]
        counts = {}
        for split, temps, n in (("test", heldout_test, args.heldout_per_intent),
                                ("dev", heldout_dev, args.heldout_per_intent),
                                ("train", tf.train, args.train_per_intent),
                                ("calib", tf.train, args.calib_per_intent)):
            exs = fill(temps, n, split_rng(args.seed, intent, split), kind, seen,
                       products=intent in autolabel.PRODUCT_INTENTS)
            for ex in exs:
                ex["intent"] = intent
            splits[split].extend(exs)
            counts[split] = len(exs)
        table.append((intent, len(tf.train), len(tf.heldout), counts))
    os.makedirs(args.out, exist_ok=True)
    for split, exs in splits.items():
        rng = split_rng(args.seed, "*", split)
        rng.shuffle(exs)
        with open(os.path.join(args.out, f"{split}.jsonl"), "w", encoding="utf-8") as f:
            for ex in exs:
                if split == "calib":
                    rec = {"text": ex["text"]}
                else:
                    rec = {"text": ex["text"], "intent": ex["intent"], "slots": ex["slots"]}
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        if args.trace:  # which template made each line (diagnosis only, never training input)
            with open(os.path.join(args.out, f"{split}.trace"), "w", encoding="utf-8") as f:
                f.writelines(ex["where"] + "\n" for ex in exs)
    print(f"{'intent':28s} {'tpl':>7s} {'train':>6s} {'dev':>4s} {'test':>4s} {'calib':>5s}")
    for intent, nt, nh, c in table:
        flag = "  <-- short" if c["train"] < args.train_per_intent or c["dev"] < args.heldout_per_intent \
            or c["test"] < args.heldout_per_intent else ""
        print(f"{intent:28s} {nt:3d}/{nh:<3d} {c['train']:6d} {c['dev']:4d} {c['test']:4d} "
              f"{c['calib']:5d}{flag}")
    print("total: " + ", ".join(f"{k} {len(v)}" for k, v in splits.items()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO_ROOT, "data", "hotline"))
    ap.add_argument("--templates", default=TEMPLATE_DIR)
    ap.add_argument("--taxonomy", default=os.path.join(REPO_ROOT, "config", "taxonomy", "hotline.yaml"))
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--train-per-intent", type=int, default=600)
    ap.add_argument("--heldout-per-intent", type=int, default=32)
    ap.add_argument("--calib-per-intent", type=int, default=22)
    ap.add_argument("--trace", action="store_true",
                    help="also write SPLIT.trace: the template (file:line) behind each line")
    args = ap.parse_args(argv)
    try:
        generate(args)
    except template.TemplateError as e:
        raise SystemExit(f"template error: {e}")


if __name__ == "__main__":
    main()
