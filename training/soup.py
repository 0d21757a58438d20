"""Average the weights of several training runs of one shape ("model soup"; Wortsman et al. 2022)
and score the average on dev the way train.py scores a run.

Runs continued from the same weights stay in one basin of the loss, so their element-wise mean
is itself a good model and usually generalises better than any one of them. Greedy: runs sorted
by their own dev score (mean of intent accuracy and slot F1); each is kept in the average only if
the average's dev score does not drop. Test and challenge figures are reported, never used.

  python3 training/soup.py --cache build-train/cache_v6.json.gz --out build-train/soup \\
      RUN_DIR RUN_DIR [RUN_DIR ...]

The output is a run folder (config.json of the best run plus the soup's recipe, metrics.json,
weights-*.npz in float32) that training/export.py takes like any other.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402
from common import Taxonomy  # noqa: E402
from model import BertJoint, load_state, read_weight_arrays, write_weight_shards  # noqa: E402

SHAPE = ("vocab_size", "n_intents", "n_tags", "layers", "hidden", "heads", "ffn", "max_length",
         "vocab_sha", "intents", "tags")


def read_weights(run):
    """A run's weights in float64 (FP16 runs from fp16_run.py included), for exact averaging."""
    return read_weight_arrays(run, np.float64)


def average(weights):
    """Element-wise mean of state dicts with identical keys and shapes (float32 result)."""
    keys = set(weights[0])
    for w in weights[1:]:
        if set(w) != keys:
            raise ValueError(f"runs hold different tensors: {sorted(keys ^ set(w))[:5]}")
    out = {}
    for k in sorted(keys):
        shapes = {w[k].shape for w in weights}
        if len(shapes) != 1:
            raise ValueError(f"tensor {k} has different shapes across runs: {shapes}")
        out[k] = (sum(w[k] for w in weights) / len(weights)).astype(np.float32)
    return out


write_weights = write_weight_shards  # the run-folder format train.py's save_run writes


def score(m):
    return (m["intent_accuracy"] + m["slot_f1"]) / 2


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run folders (config.json, weights-*.npz)")
    ap.add_argument("--cache", required=True, help="encoded data set (train.py --encode-only)")
    ap.add_argument("--out", required=True, help="run folder for the selected soup")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out_real = os.path.realpath(args.out)
    for r in args.runs:  # --out's weights and config.json are replaced: never one of the inputs
        if os.path.realpath(r) == out_real:
            raise SystemExit(f"--out {args.out} is one of the runs ({r}): pick a new folder")

    cfgs = []
    for r in args.runs:
        with open(os.path.join(r, "config.json")) as f:
            cfgs.append(json.load(f))
    for r, c in zip(args.runs[1:], cfgs[1:]):
        bad = [k for k in SHAPE if c.get(k) != cfgs[0].get(k)]
        if bad:
            raise SystemExit(f"{r}: differs from {args.runs[0]} in {bad}: not one model shape")
    if not os.path.exists(args.cache):
        raise SystemExit(f"--cache {args.cache} does not exist (write it with train.py "
                         "--encode-only --cache ...)")
    tax = Taxonomy()
    targs = argparse.Namespace(cache=args.cache, data=None, vocab=None, max_length=None,
                               max_lines=None, encode_only=False)
    data = train.load_data(targs, tax)
    for k in ("vocab_sha", "max_length"):  # dev figures on another encoding would mean nothing
        if data.get(k) != cfgs[0].get(k):
            raise SystemExit(f"--cache {args.cache}: {k} {data.get(k)!r} differs from the runs' "
                             f"{cfgs[0].get(k)!r}: encode the data the runs were trained on")
    pad = data["special"]["pad"]
    dev, test = data["splits"]["dev"], data["splits"]["test"]
    chal = data["splits"].get("challenge")
    c0 = cfgs[0]
    model = BertJoint(c0["vocab_size"], c0["n_intents"], c0["n_tags"], c0["layers"], c0["hidden"],
                      c0["heads"], c0["ffn"], dropout=0.0)
    device = torch.device("cpu")

    if not dev:
        raise SystemExit(f"--cache {args.cache} has no dev lines: nothing to select on")

    def evaluate(sd, splits=("dev",), where="the soup"):
        load_state(model, sd, where)
        sets = {"dev": dev, "test": test, "challenge": chal}
        return {s: train.evaluate(model, sets[s], tax, pad, device) for s in splits if sets[s]}

    weights = [read_weights(r) for r in args.runs]
    own = [evaluate(w, where=r)["dev"] for w, r in zip(weights, args.runs)]
    order = sorted(range(len(args.runs)), key=lambda i: -score(own[i]))
    for i in order:
        print(f"run {args.runs[i]}: dev intent {own[i]['intent_accuracy']:.4f} slot F1 "
              f"{own[i]['slot_f1']:.4f}", flush=True)
    kept, best = [order[0]], own[order[0]]
    uniform = evaluate(average(weights))["dev"] if len(weights) > 1 else best
    print(f"uniform soup of all {len(weights)}: dev intent {uniform['intent_accuracy']:.4f} "
          f"slot F1 {uniform['slot_f1']:.4f}", flush=True)
    for i in order[1:]:
        m = evaluate(average([weights[j] for j in kept + [i]]))["dev"]
        print(f"  + {args.runs[i]}: dev intent {m['intent_accuracy']:.4f} slot F1 "
              f"{m['slot_f1']:.4f} -> {'kept' if score(m) >= score(best) else 'left out'}",
              flush=True)
        if score(m) >= score(best):
            kept.append(i)
            best = m
    recipe = "greedy"
    if score(uniform) > score(best):
        kept, recipe = list(order), "uniform"  # best run first: its config.json is kept
    sd = average([weights[j] for j in kept])
    res = evaluate(sd, ("dev", "test", "challenge"))
    print(f"selected ({recipe}, {len(kept)} runs): dev intent {res['dev']['intent_accuracy']:.4f} "
          f"slot F1 {res['dev']['slot_f1']:.4f}" + (
              f"; test intent {res['test']['intent_accuracy']:.4f} slot F1 "
              f"{res['test']['slot_f1']:.4f}" if "test" in res else "") + (
              f"; challenge intent {res['challenge']['intent_accuracy']:.4f} slot F1 "
              f"{res['challenge']['slot_f1']:.4f}" if "challenge" in res else ""), flush=True)
    best_run = args.runs[kept[0]]
    os.makedirs(args.out, exist_ok=True)
    cfg = dict(cfgs[kept[0]])
    cfg["soup"] = {"recipe": recipe, "runs": [args.runs[j] for j in kept],
                   "commands": [cfgs[j].get("command") for j in kept]}
    cfg["command"] = (f"python3 training/soup.py --cache {args.cache} --out {args.out} " +
                      " ".join(args.runs) + f"   # {recipe}: " +
                      " + ".join(os.path.basename(os.path.normpath(args.runs[j])) for j in kept))
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1, ensure_ascii=False)
    met = {}
    mp = os.path.join(best_run, "metrics.json")
    if os.path.exists(mp):
        with open(mp) as f:
            met = json.load(f)
    met.pop("partial", None)  # the soup is complete even where its best run was saved mid-run
    met.update({k: res.get(k) for k in ("dev", "test", "challenge")})
    met["soup"] = cfg["soup"]
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(met, f, indent=1, ensure_ascii=False)
    write_weights(args.out, sd)
    print(f"wrote {args.out}")
    return res


if __name__ == "__main__":
    main()
