#!/usr/bin/env python3
"""Label-consistency report: slot values that also occur unlabelled in other utterances.

    python3 training/data_gen/label_consistency.py [--data data/hotline] [--min 5]

A value labelled as slot X in some training utterances (say item 会员卡) but left unlabelled in
others teaches the tagger two answers for the same characters. For every value labelled at least
--min times, counts the train utterances where the same string occurs outside any span, and
prints the values with the highest unlabelled share. Informational: always exits 0.
"""
import argparse
import collections
import json
import os
import sys

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def report(path, min_count, top, out=sys.stdout):
    with open(path, encoding="utf-8") as f:
        exs = [json.loads(line) for line in f]
    labelled = collections.Counter()
    for ex in exs:
        for s in ex["slots"]:
            labelled[(s["type"], s["value"])] += 1
    values = {k: n for k, n in labelled.items() if n >= min_count and len(k[1]) >= 2}
    unlabelled = collections.Counter()
    for ex in exs:
        text = ex["text"]
        covered = [False] * len(text)
        for s in ex["slots"]:
            for i in range(s["start"], s["end"]):
                covered[i] = True
        for key in values:
            v = key[1]
            start = text.find(v)
            while start >= 0:
                if not any(covered[start:start + len(v)]):
                    unlabelled[key] += 1
                    break
                start = text.find(v, start + 1)
    rows = sorted(((unlabelled[k] / (unlabelled[k] + n), k, n, unlabelled[k])
                   for k, n in values.items() if unlabelled[k]), reverse=True)
    print(f"{len(rows)} of {len(values)} frequent slot values also occur unlabelled", file=out)
    for share, (typ, val), n, u in rows[:top]:
        print(f"  {share:5.1%}  {typ:12s} {val}  labelled {n}, unlabelled {u}", file=out)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default=os.path.join(REPO_ROOT, "data", "hotline"))
    ap.add_argument("--min", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    report(os.path.join(args.data, "train.jsonl"), args.min, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
