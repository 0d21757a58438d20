"""`hotline predict` and `hotline eval` end to end on the tiny fixture model (a private copy, so
plans are cached in a temporary folder). Expected values come from tiny_reference.json (PyTorch)."""
import json
import os
import shutil
import subprocess

import pytest
import yaml

HOTLINE = os.environ.get("HOTLINE_BIN", "hotline")
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "nlu")
with open(os.path.join(FIXTURES, "tiny_model", "taxonomy.yaml"), encoding="utf-8") as _f:
    _doc = yaml.safe_load(_f)
TAXONOMY = {"intents": {i["id"]: i for i in _doc["intents"]}, "categories": _doc["categories"]}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    dst = tmp_path_factory.mktemp("m") / "tiny_model"
    shutil.copytree(os.path.join(FIXTURES, "tiny_model"), dst)
    return str(dst)


@pytest.fixture(scope="module")
def reference():
    return json.load(open(os.path.join(FIXTURES, "tiny_reference.json"), encoding="utf-8"))


def run(args, stdin=b""):
    return subprocess.run([HOTLINE, *args], input=stdin, capture_output=True, timeout=300)


def test_predict_lines_and_json(model, reference):
    refs = reference[:6]
    lines = [r["text"] for r in refs[:3]] + [json.dumps({"text": r["text"]}, ensure_ascii=False)
                                             for r in refs[3:]]
    p = run(["predict", "--model", model, "--batch", "4"], ("\n".join(lines) + "\n").encode())
    assert p.returncode == 0, p.stderr.decode()
    out = [json.loads(l) for l in p.stdout.decode().splitlines()]
    assert len(out) == len(refs)
    for o, r in zip(out, refs):
        assert o["intent"] == r["intent"]
        assert abs(o["confidence"] - r["confidence"]) < 1e-4
        assert [(s["type"], s["start"], s["end"], s["value"]) for s in o["slots"]] == [
            (s["type"], s["start"], s["end"], s["value"]) for s in r["slots"]]
        for s in o["slots"]:
            assert r["text"][s["start"]:s["end"]] == s["value"]
            assert "normalized" in s
        assert o["department"] and o["business_line"] and len(o["top_k"]) == 3
        # The category and its name, as the fixture's taxonomy file says (read here with PyYAML).
        info = TAXONOMY["intents"][r["intent"]]
        assert o["department"] == info["dept"]
        assert o["category"] == info["category"]
        assert o["category_name"] == TAXONOMY["categories"][info["category"]]
        assert o["truncated"] is False
    # The plan was built once and cached in the model folder.
    assert any(f.endswith(".plan") for f in os.listdir(os.path.join(model, "cache")))


def test_predict_bad_lines_do_not_stop_the_stream(model):
    data = "你好\n".encode() + b"\xff\xfe\n" + b'{"txt": 1}\n' + b"\n" + "再见\n".encode()
    p = run(["predict", "--model", model], data)
    assert p.returncode == 1
    out = [json.loads(l) for l in p.stdout.decode().splitlines()]
    assert len(out) == 5
    assert out[0]["intent"] == "greeting"
    assert "invalid UTF-8" in out[1]["error"]
    assert "text" in out[2]["error"]
    assert out[3]["intent"] == "out_of_scope" and out[3]["confidence"] == 0
    assert "intent" in out[4]


def test_eval_json(model, reference, tmp_path):
    # Labelled with the model's own PyTorch predictions: everything right...
    data = tmp_path / "d.jsonl"
    rows = [{"text": r["text"], "intent": r["intent"], "slots": r["slots"]} for r in reference]
    # ...except one intent and one slot span, changed on purpose.
    rows[0]["intent"] = "pension_inquiry"
    k = next(i for i, r in enumerate(rows) if r["slots"])
    rows[k]["slots"][0] = dict(rows[k]["slots"][0], end=rows[k]["slots"][0]["end"] + 1)
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n",
                    encoding="utf-8")
    p = run(["eval", "--model", model, "--data", str(data), "--json"])
    assert p.returncode == 0, p.stderr.decode()
    j = json.loads(p.stdout.decode().strip().splitlines()[-1])
    n = len(rows)
    gold = sum(len(r["slots"]) for r in rows)
    assert j["n"] == n
    assert j["intent_accuracy"] == pytest.approx((n - 1) / n)
    assert j["slot_tp"] == gold - 1 and j["slot_gold"] == gold and j["slot_predicted"] == gold
    assert j["slot_precision"] == pytest.approx((gold - 1) / gold)
    assert j["slot_f1"] == pytest.approx((gold - 1) / gold)
    assert j["per_intent"]["pension_inquiry"]["n"] == 1
    assert j["per_intent"]["pension_inquiry"]["correct"] == 0
    assert j["confusions"][0] == {"gold": "pension_inquiry", "predicted": reference[0]["intent"],
                                  "count": 1}
    p = run(["eval", "--model", model, "--data", str(data)])
    assert p.returncode == 0 and b"intent accuracy" in p.stdout


def test_eval_bad_data_names_the_line(model, tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"text": "你好", "intent": "greeting", "slots": []}\n{"text": 3}\n')
    p = run(["eval", "--model", model, "--data", str(data)])
    assert p.returncode == 1
    assert b"bad.jsonl:2" in p.stderr
