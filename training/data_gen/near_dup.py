#!/usr/bin/env python3
"""Near-duplicate report between splits: how much of dev/test is a near-copy of train.

    python3 training/data_gen/near_dup.py [--data data/hotline] [--threshold 0.6]

Slot values are masked first (each span becomes one placeholder character per slot type), so
two utterances that differ only in the filled values count as duplicates. Punctuation and spaces
are dropped. Similarity is the Jaccard index of character 5-gram sets (whole string when shorter);
a dev/test utterance is a near-duplicate when its best match among train utterances of ANY intent
reaches the threshold. Prints the rate per split, the worst intents and a few examples, and the
number of masked texts that occur in train under two different intents (label conflicts).
Exit status 0 always unless --max-rate is given and exceeded.
"""
import argparse
import collections
import json
import os
import re
import sys

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# One private-use character per slot type, so masks never collide with text.
_MASK_BASE = 0xE000
_PUNCT_RE = re.compile(r"[\s，。？！、；：,.?!;:…~“”\"'（）()]+")


def mask(ex, slot_ids):
    text, out, pos = ex["text"], [], 0
    for s in sorted(ex["slots"], key=lambda s: s["start"]):
        out.append(text[pos:s["start"]])
        out.append(chr(_MASK_BASE + slot_ids.setdefault(s["type"], len(slot_ids))))
        pos = s["end"]
    out.append(text[pos:])
    return _PUNCT_RE.sub("", "".join(out))


def grams(s, n=5):
    if len(s) <= n:
        return {s}
    return {s[i:i + n] for i in range(len(s) - n + 1)}


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def best_match(g, index, train_grams):
    """Max Jaccard of gram set g against train, via an inverted index (candidates share a gram)."""
    shared = collections.Counter()
    for x in g:
        for j in index.get(x, ()):
            shared[j] += 1
    best, best_j = 0.0, -1
    for j, inter in shared.items():
        jac = inter / (len(g) + len(train_grams[j]) - inter)
        if jac > best:
            best, best_j = jac, j
    return best, best_j


def report(data_dir, threshold, examples, out=sys.stdout):
    slot_ids = {}
    train = load(os.path.join(data_dir, "train.jsonl"))
    train_masked = [mask(ex, slot_ids) for ex in train]
    train_grams = [grams(m) for m in train_masked]
    index = collections.defaultdict(list)
    for j, g in enumerate(train_grams):
        for x in g:
            index[x].append(j)
    # Very common grams (masked-slot runs, 你好请问…) make the index slow and say nothing.
    cap = max(200, len(train) // 20)
    index = {x: js for x, js in index.items() if len(js) <= cap}

    by_text = collections.defaultdict(set)
    for m, ex in zip(train_masked, train):
        by_text[m].add(ex["intent"])
    conflicts = sum(1 for v in by_text.values() if len(v) > 1)

    rates = {}
    for split in ("dev", "test"):
        path = os.path.join(data_dir, f"{split}.jsonl")
        if not os.path.exists(path):
            continue
        exs = load(path)
        dup, per_intent, total_intent, shown = 0, collections.Counter(), collections.Counter(), []
        exact = 0
        buckets = collections.Counter()
        for ex in exs:
            m = mask(ex, slot_ids)
            total_intent[ex["intent"]] += 1
            if m in by_text:
                sim, j = 1.0, train_masked.index(m)
                exact += 1
            else:
                sim, j = best_match(grams(m), index, train_grams)
            buckets[min(int(sim * 10), 9)] += 1
            if sim >= threshold:
                dup += 1
                per_intent[ex["intent"]] += 1
                if len(shown) < examples:
                    shown.append((sim, ex["text"], train[j]["text"]))
        rate = dup / max(1, len(exs))
        rates[split] = rate
        print(f"{split}: {dup}/{len(exs)} near-duplicates of train at Jaccard(5-gram, masked) >= "
              f"{threshold} -> rate {rate:.2%} (exact masked copies: {exact})", file=out)
        print("  best-match similarity histogram: " + "  ".join(
            f"{b / 10:.1f}-{(b + 1) / 10:.1f}: {buckets[b]}" for b in range(10) if buckets[b]), file=out)
        worst = sorted(per_intent.items(), key=lambda kv: -kv[1] / total_intent[kv[0]])[:8]
        if worst:
            print("  worst intents: " + ", ".join(
                f"{k} {v}/{total_intent[k]}" for k, v in worst), file=out)
        for sim, a, b in shown:
            print(f"  {sim:.2f}  {a}  <->  {b}", file=out)
    print(f"train: {conflicts} masked texts appear under two or more intents", file=out)
    return rates, conflicts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default=os.path.join(REPO_ROOT, "data", "hotline"))
    ap.add_argument("--threshold", type=float, default=0.6)
    ap.add_argument("--examples", type=int, default=5)
    ap.add_argument("--max-rate", type=float, default=None,
                    help="exit 1 when a split's near-duplicate rate exceeds this")
    args = ap.parse_args(argv)
    rates, _ = report(args.data, args.threshold, args.examples)
    if args.max_rate is not None and any(r > args.max_rate for r in rates.values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
