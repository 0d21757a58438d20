"""Train-your-own: a city's labelled historical orders -> a dispatcher model folder and a report.

  make train DATA=orders.jsonl OUT=models/mycity [NAME=mycity] [INIT=models/haikou] [UPDATE=1]
  python3 training/city.py --data orders.jsonl --out models/mycity

DATA: JSONL, one order a line: `text` and `label` (the handling department), optionally
`category` ("/"-joined path) or `cat1`..`cat4`, and `order_id` or `time` (sortable).
Orders with an id or time are split by it (the latest --test-frac are the held-out test, the
--dev-frac before them dev: a model is judged on orders that came after its training); without,
by a hash of the text. Identifiers (ID, phone, plate) are masked before training.

The encoder starts from a shipped folder (--init, default models/haikou: our encoder pretrained
on real Chinese and 12345 orders), so a small model trains on a CPU in minutes; --time-budget
bounds it. OUT gets the folder (model.onnx, vocab.txt, labels.json, model.yaml, weights map) and
REPORT.md: department top-1/top-3, category accuracy, per-department accuracy, the commonest
confusions, and the char n-gram TF-IDF + linear SVM anchor on the same split beside it.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPO, read_jsonl  # noqa: E402
from corpus import mask_pii  # noqa: E402


def split_rows(rows, dev_frac, test_frac):
    key = "order_id" if all(r.get("order_id") for r in rows) else \
        "time" if all(r.get("time") for r in rows) else None
    if key:
        rows = sorted(rows, key=lambda r: str(r[key]))
        n = len(rows)
        n_test, n_dev = int(round(n * test_frac)), int(round(n * dev_frac))
        return rows[:n - n_test - n_dev], rows[n - n_test - n_dev:n - n_test], rows[n - n_test:], key
    parts = ([], [], [])
    for r in rows:
        h = int(hashlib.sha256(r["text"].encode("utf-8")).hexdigest()[:8], 16) / 2**32
        parts[2 if h < test_frac else 1 if h < test_frac + dev_frac else 0].append(r)
    return parts + ("hash",)


def report(out, train, test, metrics, anchor):
    pred = metrics["predictions"]
    lines = ["# Training report", "",
             f"Orders: {len(train)} train, {metrics['n_dev']} dev, {len(test)} test "
             f"(split by {metrics['split_by']}).", "",
             "| model | department top-1 | top-3 | category |", "|---|---|---|---|"]
    t = metrics["test"]
    cat = t.get("category", {}).get("top1")
    lines.append(f"| this model | {t['department']['top1']:.4f} | {t['department']['top3']:.4f} "
                 f"| {cat if cat is None else f'{cat:.4f}'} |")
    if anchor:
        acat = anchor.get("category")
        lines.append(f"| TF-IDF char 1-3 + linear SVM (anchor) | {anchor['department']:.4f} | - "
                     f"| {'-' if acat is None else f'{acat:.4f}'} |")
    lines += ["", "## Per department (test)", "", "| department | n | accuracy |", "|---|---|---|"]
    gold = [r["label"] for r in test]
    by = Counter(gold)
    right = Counter(g for g, p in zip(gold, pred) if g == p)
    for d, n in by.most_common():
        lines.append(f"| {d} | {n} | {right[d] / n:.3f} |")
    conf = Counter((g, p) for g, p in zip(gold, pred) if g != p)
    lines += ["", "## Commonest confusions (test)", "", "| gold | predicted | n |", "|---|---|---|"]
    for (g, p), n in conf.most_common(15):
        lines.append(f"| {g} | {p} | {n} |")
    with open(os.path.join(out, "REPORT.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default=None)
    ap.add_argument("--init", default=os.path.join(REPO, "models", "haikou"),
                    help="model folder whose encoder starts the training ('' : from scratch)")
    ap.add_argument("--update", action="store_true",
                    help="DATA are newer orders of the --init folder's own city: its heads start "
                    "from the folder's, and departments the new orders lack stay")
    ap.add_argument("--work", default=None, help="scratch folder (default OUT/../.train-NAME)")
    ap.add_argument("--dev-frac", type=float, default=0.08)
    ap.add_argument("--test-frac", type=float, default=0.15)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--time-budget", type=float, default=900)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--no-anchor", action="store_true", help="skip the TF-IDF anchor")
    a = ap.parse_args(argv)
    name = a.name or os.path.basename(os.path.normpath(a.out))
    rows = read_jsonl(a.data)
    for n, r in enumerate(rows, 1):
        if not isinstance(r.get("text"), str) or not r["text"].strip():
            raise SystemExit(f"{a.data}:{n}: no text")
        if not isinstance(r.get("label"), str) or not r["label"]:
            raise SystemExit(f"{a.data}:{n}: no label (the handling department)")
        r["text"] = mask_pii(r["text"])
    train, dev, test, split_by = split_rows(rows, a.dev_frac, a.test_frac)
    if len(train) < 10 or not dev or not test:
        raise SystemExit(f"{a.data}: {len(rows)} orders are too few to train and test on")
    work = a.work or os.path.join(os.path.dirname(os.path.abspath(a.out)), f".train-{name}")
    os.makedirs(work, exist_ok=True)
    for s, rs in (("train", train), ("dev", dev), ("test", test)):
        with open(os.path.join(work, s + ".jsonl"), "w", encoding="utf-8") as f:
            for r in rs:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    import train_classifier
    import export_classifier
    targs = ["--data", work, "--out", os.path.join(work, "run"), "--epochs", str(a.epochs),
             "--time-budget", str(a.time_budget), "--max-length", str(a.max_length),
             "--device", a.device]
    if a.update and not a.init:
        raise SystemExit("--update needs --init: the folder to update")
    if a.init:
        targs += ["--init-model", a.init, "--vocab", os.path.join(a.init, "vocab.txt")]
        targs += ["--keep-labels"] if a.update else []
    else:
        targs += ["--vocab", os.path.join(REPO, "models", "default", "vocab.txt"),
                  "--layers", "4", "--hidden", "256", "--heads", "4", "--ffn", "1024"]
    train_classifier.main(targs)
    vocab = os.path.join(a.init, "vocab.txt") if a.init else \
        os.path.join(REPO, "models", "default", "vocab.txt")
    rep = export_classifier.main(["--run", os.path.join(work, "run"), "--vocab", vocab,
                                  "--data", work, "--out", a.out, "--name", name])
    # Predictions of the exported file for the per-department table.
    import numpy as np
    import onnxruntime as ort
    from train_classifier import Tok
    sess = ort.InferenceSession(os.path.join(a.out, "model.onnx"),
                                providers=["CPUExecutionProvider"])
    with open(os.path.join(a.out, "labels.json"), encoding="utf-8") as f:
        labels = json.load(f)
    tok = Tok(os.path.join(a.out, "vocab.txt"), a.max_length)
    pred = []
    for b in range(0, len(test), 32):
        seqs = tok([r["text"] for r in test[b:b + 32]])
        n = max(map(len, seqs))
        ids = np.zeros((len(seqs), n), np.int64)
        mask = np.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = s
            mask[i, :len(s)] = 1
        lg = sess.run(["department_logits"], {"input_ids": ids, "attention_mask": mask,
                                              "token_type_ids": np.zeros_like(ids)})[0]
        pred += [labels["department"][k] for k in lg.argmax(1)]
    anchor = None
    if not a.no_anchor:
        anchor_py = os.path.join(REPO, "bench", "tfidf_anchor.py")
        if os.path.exists(anchor_py):
            out_json = os.path.join(work, "anchor.json")
            res = subprocess.run([sys.executable, anchor_py, "--train",
                                  os.path.join(work, "train.jsonl"), "--test",
                                  os.path.join(work, "test.jsonl"), "--json", out_json],
                                 capture_output=True, text=True)
            if res.returncode == 0:
                with open(out_json, encoding="utf-8") as f:
                    row = json.load(f)["rows"][0]
                anchor = {"department": row["department_top1"],
                          "category": row.get("category_accuracy")}
            else:
                print(f"anchor failed: {res.stderr[-500:]}", file=sys.stderr)
        else:
            print("anchor skipped: bench/tfidf_anchor.py is missing", file=sys.stderr)
    report(a.out, train, test, dict(rep, predictions=pred, n_dev=len(dev), split_by=split_by),
           anchor)
    print(f"wrote {a.out} and {os.path.join(a.out, 'REPORT.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
