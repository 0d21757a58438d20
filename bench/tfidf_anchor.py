#!/usr/bin/env python3
"""The anchor peer for department dispatch: character 1-3-gram TF-IDF + linear SVM (scikit-learn),
trained on a JSONL train file and scored on a JSONL test file, side by side with Hotline's C++
classifier on the same test lines.

    python bench/tfidf_anchor.py --train TRAIN.jsonl --test TEST.jsonl \\
        [--hotline build/hotline --model models/haikou]      # runs `hotline predict` in batch
        [--hotline-predictions PRED.jsonl]                   # or reads its JSON lines
        [--json OUT.json] [--save-anchor A.jsonl | --anchor-predictions A.jsonl]

Lines: {"text", "label" (the department), "category" (optional "/"-joined path) or cat1..cat4}.
PRED.jsonl: one `hotline predict` / `hotline eval --predictions` line per test line, in order
({"department", "category", "top_k": [{"department", "score"}], ...}).

Prints department top-1 / top-3 accuracy and category accuracy, whole path and its first level
(over the test lines that carry a category), for each model, and how often the two agree on the department. Reads only the files
named on the command line.
"""
import argparse
import json
import subprocess
import sys
import time

import numpy as np


def category_of(row):
    if row.get("category"):
        return row["category"]
    parts = [row.get(f"cat{i}") or "" for i in range(1, 5)]
    while parts and not parts[-1]:
        parts.pop()
    return "/".join(parts) if parts else ""


def read_rows(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                rows.append({"text": r["text"], "label": r["label"], "category": category_of(r)})
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{path}:{no}: expected {{\"text\", \"label\", \"category\"?}}: {e}")
    if not rows:
        sys.exit(f"{path} holds no labelled lines")
    return rows


class Anchor:
    """TF-IDF over character 1-3-grams, one linear SVM per head (one-vs-rest)."""

    def __init__(self, c=1.0, min_df=1):
        self.c, self.min_df = c, min_df

    def fit(self, rows):
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.svm import LinearSVC
        self.vec = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True,
                                   min_df=self.min_df)
        x = self.vec.fit_transform([r["text"] for r in rows])
        self.dept = LinearSVC(C=self.c).fit(x, [r["label"] for r in rows])
        with_cat = [i for i, r in enumerate(rows) if r["category"]]
        self.cat = None
        if len({rows[i]["category"] for i in with_cat}) >= 2:
            self.cat = LinearSVC(C=self.c).fit(x[with_cat], [rows[i]["category"] for i in with_cat])
        return self

    def predict(self, texts):
        x = self.vec.transform(texts)
        scores = self.dept.decision_function(x)
        if scores.ndim == 1:  # two classes: one margin
            scores = np.stack([-scores, scores], axis=1)
        order = np.argsort(-scores, axis=1, kind="stable")
        classes = self.dept.classes_
        cats = self.cat.predict(x) if self.cat is not None else [""] * len(texts)
        return [{"department": classes[o[0]], "top_k": [classes[k] for k in o[:5]],
                 "category": c} for o, c in zip(order, cats)]


def hotline_predict(binary, model, texts, batch=32):
    """`hotline predict` on the texts (JSON lines in, so texts may hold newlines)."""
    stdin = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts)
    p = subprocess.run([binary, "predict", "--model", model, "--batch", str(batch),
                        "--top-k", "5"], input=stdin.encode(), capture_output=True)
    if p.returncode != 0:
        sys.exit(f"hotline predict failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    return [json.loads(line) for line in p.stdout.decode().splitlines()]


def from_hotline(preds):
    out = []
    for p in preds:
        if "error" in p:
            sys.exit(f"a hotline prediction is an error: {p['error']}")
        out.append({"department": p["department"], "category": p.get("category", ""),
                    "top_k": [t["department"] for t in p.get("top_k", [])]})
    return out


def score(rows, preds):
    n = len(rows)
    top1 = sum(p["department"] == r["label"] for r, p in zip(rows, preds))
    top3 = sum(r["label"] in p["top_k"][:3] for r, p in zip(rows, preds))
    cat = [(r, p) for r, p in zip(rows, preds) if r["category"]]
    cat_ok = sum(p["category"] == r["category"] for r, p in cat)
    lvl1 = sum(p["category"].split("/")[0] == r["category"].split("/")[0] for r, p in cat)
    return {"n": n, "department_top1": top1 / n, "department_top3": top3 / n,
            "category_n": len(cat), "category_accuracy": cat_ok / len(cat) if cat else None,
            "category_level1": lvl1 / len(cat) if cat else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", required=True, help="JSONL: text, label, category")
    ap.add_argument("--test", required=True, help="JSONL: text, label, category")
    ap.add_argument("--hotline", help="the hotline binary, to run `hotline predict`")
    ap.add_argument("--model", help="with --hotline: the classifier model folder")
    ap.add_argument("--hotline-predictions", help="`hotline predict` JSON lines for --test")
    ap.add_argument("--C", type=float, default=1.0, help="the SVMs' regularisation")
    ap.add_argument("--min-df", type=int, default=1, help="n-grams seen in fewer lines are dropped")
    ap.add_argument("--json", help="also write the table as JSON here")
    ap.add_argument("--save-anchor", help="write the anchor's predictions for --test here (JSONL)")
    ap.add_argument("--anchor-predictions",
                    help="read the anchor's predictions (--save-anchor of an earlier run on the "
                         "same --test) instead of training it again")
    a = ap.parse_args()
    if bool(a.hotline) != bool(a.model):
        ap.error("--hotline and --model go together")
    if a.hotline and a.hotline_predictions:
        ap.error("give --hotline/--model or --hotline-predictions, not both")

    train, test = read_rows(a.train), read_rows(a.test)
    texts = [r["text"] for r in test]
    if a.anchor_predictions:
        with open(a.anchor_predictions, encoding="utf-8") as f:
            anchor_preds = [json.loads(l) for l in f if l.strip()]
        if len(anchor_preds) != len(test):
            sys.exit(f"{a.anchor_predictions} has {len(anchor_preds)} predictions for {len(test)} "
                     "test lines")
        fit_s, run_s = None, None
    else:
        t0 = time.time()
        anchor = Anchor(a.C, a.min_df).fit(train)
        fit_s = time.time() - t0
        t0 = time.time()
        anchor_preds = anchor.predict(texts)
        run_s = time.time() - t0
    if a.save_anchor:
        with open(a.save_anchor, "w", encoding="utf-8") as f:
            for p in anchor_preds:
                f.write(json.dumps(p, ensure_ascii=False) + "\n")
    results = [("tfidf char1-3 + linear SVM", score(test, anchor_preds), fit_s, run_s)]
    anchor_dept = [p["department"] for p in anchor_preds]
    ours = None
    if a.hotline:
        t0 = time.time()
        ours = from_hotline(hotline_predict(a.hotline, a.model, texts))
        results.append((f"hotline {a.model}", score(test, ours), None, time.time() - t0))
    elif a.hotline_predictions:
        with open(a.hotline_predictions, encoding="utf-8") as f:
            ours = from_hotline([json.loads(l) for l in f if l.strip()])
        if len(ours) != len(test):
            sys.exit(f"{a.hotline_predictions} has {len(ours)} predictions for {len(test)} test "
                     "lines")
        results.append((f"hotline ({a.hotline_predictions})", score(test, ours), None, None))

    print(f"train {len(train)} lines ({a.train}), test {len(test)} lines ({a.test})")
    print(f"{'model':<40} {'dept top-1':>10} {'dept top-3':>10} {'category':>9} {'level 1':>8} "
          f"{'seconds':>8}")
    for name, s, fit, run in results:
        cat = "-" if s["category_accuracy"] is None else f"{s['category_accuracy']:.4f}"
        lvl1 = "-" if s["category_level1"] is None else f"{s['category_level1']:.4f}"
        secs = "-" if run is None else f"{run + (fit or 0):.1f}"
        print(f"{name:<40} {s['department_top1']:>10.4f} {s['department_top3']:>10.4f} "
              f"{cat:>9} {lvl1:>8} {secs:>8}")
    out = {"train": a.train, "test": a.test, "n_train": len(train),
           "rows": [{"model": n, **s} for n, s, _, _ in results]}
    if ours is not None:
        agree = float(np.mean([x == p["department"] for x, p in zip(anchor_dept, ours)]))
        print(f"department agreement between the two: {agree:.4f}")
        out["department_agreement"] = agree
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
