"""`hotline predict` and `hotline eval` on a classifier folder (the tiny fixture, a private copy),
and bench/tfidf_anchor.py beside it. Expected values come from tiny_classifier_reference.json
(ONNX Runtime on the same FP16-weight file; its eval figures counted in Python)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

HOTLINE = os.environ.get("HOTLINE_BIN", "hotline")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "nlu")
EVAL = os.path.join(FIXTURES, "tiny_classifier_eval.jsonl")
ANCHOR = os.path.join(ROOT, "bench", "tfidf_anchor.py")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    dst = tmp_path_factory.mktemp("c") / "tiny_classifier"
    shutil.copytree(os.path.join(FIXTURES, "tiny_classifier"), dst)
    return str(dst)


@pytest.fixture(scope="module")
def ref():
    with open(os.path.join(FIXTURES, "tiny_classifier_reference.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def labels():
    with open(os.path.join(FIXTURES, "tiny_classifier", "labels.json"), encoding="utf-8") as f:
        return json.load(f)


def run(args, stdin=b""):
    return subprocess.run([HOTLINE, *args], input=stdin, capture_output=True, timeout=300)


def check(o, case, labels):
    want = case["modes"]["head_tail"]
    assert o["department"] == want["department"]
    assert o["category"] == want["category"]
    assert [t["department"] for t in o["top_k"]] == want["department_top_k"][:len(o["top_k"])]
    dp = dict(zip(labels["department"], want["department_probs"]))
    cp = dict(zip(labels["category"], want["category_probs"]))
    assert abs(o["department_score"] - dp[o["department"]]) < 2e-4
    assert abs(o["category_score"] - cp[o["category"]]) < 2e-4
    for t in o["top_k"]:
        assert abs(t["score"] - dp[t["department"]]) < 2e-4
    assert o["truncated"] == want["truncated"]
    assert "intent" not in o


def test_predict_text_options(model, ref, labels):
    cases = ref["cases"][:2] + ref["cases"][-4:]
    args = ["predict", "--model", model]
    for c in cases:
        args += ["--text", c["text"]]
    p = run(args)
    assert p.returncode == 0, p.stderr.decode()
    out = [json.loads(l) for l in p.stdout.decode().splitlines()]
    assert len(out) == len(cases)
    for o, c in zip(out, cases):
        check(o, c, labels)
        assert len(o["top_k"]) == ref["top_k"]  # model.yaml's top_k
        assert len(o["category_top_k"]) == ref["top_k"]
    assert sum(o["truncated"] for o in out) >= 2


def test_predict_stdin_and_top_k(model, ref, labels):
    lines = [json.dumps({"text": c["text"]}, ensure_ascii=False) for c in ref["cases"]]
    p = run(["predict", "--model", model, "--batch", "8", "--top-k", "2"],
            ("\n".join(lines) + "\n").encode())
    assert p.returncode == 0, p.stderr.decode()
    out = [json.loads(l) for l in p.stdout.decode().splitlines()]
    assert len(out) == len(ref["cases"])
    for o, c in zip(out, ref["cases"]):
        check(o, c, labels)
        assert len(o["top_k"]) == 2


def test_eval_reports_top1_top3_and_category(model, ref, tmp_path):
    pred = str(tmp_path / "pred.jsonl")
    p = run(["eval", "--model", model, "--data", EVAL, "--json", "--predictions", pred])
    assert p.returncode == 0, p.stderr.decode()
    j = json.loads(p.stdout)
    e = ref["eval"]
    assert j["n"] == e["n"]
    assert j["department_accuracy"] == pytest.approx(e["department_top1"] / e["n"])
    assert j["department_top3_accuracy"] == pytest.approx(e["department_top3"] / e["n"])
    assert j["category_n"] == e["category_n"]
    assert j["category_accuracy"] == pytest.approx(e["category_correct"] / e["category_n"])
    assert sum(d["n"] for d in j["per_department"].values()) == e["n"]
    assert sum(d["correct"] for d in j["per_department"].values()) == e["department_top1"]
    with open(pred, encoding="utf-8") as f:
        preds = [json.loads(l) for l in f]
    assert len(preds) == e["n"] and all("department" in x for x in preds)
    # Level 1 of the category path, counted here from the gold lines and the predictions.
    with open(EVAL, encoding="utf-8") as f:
        gold = [json.loads(l) for l in f]
    lvl1 = [g["category"].split("/")[0] == p["category"].split("/")[0]
            for g, p in zip(gold, preds) if "category" in g]
    assert j["category_level1_accuracy"] == pytest.approx(sum(lvl1) / len(lvl1))
    assert j["category_level1_accuracy"] >= j["category_accuracy"]
    # The same data with the path as cat1..cat4 levels (as the orders carry it) scores the same.
    levels = tmp_path / "levels.jsonl"
    with open(levels, "w", encoding="utf-8") as f:
        for g in gold:
            row = {"text": g["text"], "label": g["label"]}
            for k, part in enumerate(g.get("category", "").split("/") if "category" in g else []):
                row[f"cat{k + 1}"] = part
            if "category" in g:
                row["cat4"] = row.get("cat4", "")  # an empty last level is dropped
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    p = run(["eval", "--model", model, "--data", str(levels), "--json"])
    assert p.returncode == 0, p.stderr.decode()
    j2 = json.loads(p.stdout)
    for k in ("n", "department_accuracy", "category_n", "category_accuracy",
              "category_level1_accuracy"):
        assert j2[k] == j[k], k
    # The table form carries the same figures.
    p = run(["eval", "--model", model, "--data", EVAL])
    assert p.returncode == 0, p.stderr.decode()
    head = p.stdout.decode().splitlines()[0]
    assert f"top-1 {e['department_top1'] / e['n']:.4f}" in head, head
    assert f"category {e['category_correct'] / e['category_n']:.4f}" in head, head


def test_eval_bad_input(model, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "海秀路停水了", "label": "供水有限公司"}\n{"text": "x"}\n',
                   encoding="utf-8")
    p = run(["eval", "--model", model, "--data", str(bad)])
    assert p.returncode == 1
    assert "bad.jsonl:2" in p.stderr.decode()
    p = run(["eval", "--model", model, "--data", EVAL, "--compare-precisions"])
    assert p.returncode == 1 and "is a classifier" in p.stderr.decode()
    # The dialog runs on a joint model only.
    p = run(["chat", "--model", model])
    assert p.returncode == 1 and "the dialog needs a joint" in p.stderr.decode()


def anchor(*args):
    p = subprocess.run([sys.executable, ANCHOR, *args], capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def test_tfidf_anchor_side_by_side(model, ref, tmp_path):
    # A train set where each department has its own words: the anchor must get every test line
    # (written with those words, in other sentences) right.
    words = {"供水有限公司": ["停水", "没水", "水压"], "公安局交通警察支队": ["停车", "红绿灯", "堵路"],
             "市政管理局": ["井盖", "路面", "违建"]}
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    with open(train, "w", encoding="utf-8") as f:
        for dept, ws in words.items():
            for k, w in enumerate(ws * 4):
                f.write(json.dumps({"text": f"第{k}次反映{w}的问题", "label": dept,
                                    "category": dept + "/问题"}, ensure_ascii=False) + "\n")
    with open(test, "w", encoding="utf-8") as f:
        for dept, ws in words.items():
            for w in ws:
                f.write(json.dumps({"text": f"小区{w}好几天了", "label": dept, "cat1": dept,
                                    "cat2": "问题"}, ensure_ascii=False) + "\n")
    out_json = tmp_path / "a.json"
    saved = tmp_path / "anchor.jsonl"
    anchor("--train", str(train), "--test", str(test), "--json", str(out_json),
           "--save-anchor", str(saved))
    a = json.loads(out_json.read_text(encoding="utf-8"))
    assert a["rows"][0]["department_top1"] == 1.0 and a["rows"][0]["category_accuracy"] == 1.0
    # Its saved predictions score the same without training again.
    anchor("--train", str(train), "--test", str(test), "--json", str(out_json),
           "--anchor-predictions", str(saved))
    assert json.loads(out_json.read_text(encoding="utf-8"))["rows"][0] == a["rows"][0]

    # Side by side with the C++ model on the fixture's eval set: the hotline row is `hotline
    # eval`'s figures, whether the bench runs `hotline predict` or reads its predictions.
    e = ref["eval"]
    pred = tmp_path / "pred.jsonl"
    assert run(["eval", "--model", model, "--data", EVAL, "--predictions", str(pred)]).returncode == 0
    for extra in (["--hotline", HOTLINE, "--model", model], ["--hotline-predictions", str(pred)]):
        anchor("--train", EVAL, "--test", EVAL, "--json", str(out_json), *extra)
        rows = json.loads(out_json.read_text(encoding="utf-8"))["rows"]
        assert len(rows) == 2
        ours = rows[1]
        assert ours["department_top1"] == pytest.approx(e["department_top1"] / e["n"])
        assert ours["department_top3"] == pytest.approx(e["department_top3"] / e["n"])
        assert ours["category_accuracy"] == pytest.approx(e["category_correct"] / e["category_n"])
