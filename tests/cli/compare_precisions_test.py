"""`hotline eval --compare-precisions` on the tiny NLU fixture model: one row per precision, each
scored in a process of its own; figures checked against `hotline eval` run directly on the model
folder at that precision, and intent agreement recomputed here from the predictions."""
import json
import os
import shutil

import pytest

from cli_util import ROOT, TINY, head, run

N = 200


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    model = str(d / "tiny_model")
    shutil.copytree(TINY, model)
    data = head(os.path.join(ROOT, "data/hotline/test.jsonl"), str(d / "data.jsonl"), N)
    calib = head(os.path.join(ROOT, "data/hotline/calib.jsonl"), str(d / "calib.jsonl"), 100)
    return {"dir": str(d), "model": model, "data": data, "calib": calib}


def direct(env, precision):
    pred = os.path.join(env["dir"], precision + ".pred")
    p = run(["eval", "--model", env["model"], "--data", env["data"], "--precision", precision,
             "--json", "--predictions", pred])
    assert p.returncode == 0, p.stderr.decode()
    res = json.loads(p.stdout)
    res["predicted"] = open(pred).read().split()
    return res


def test_compare_precisions_json(env):
    p = run(["eval", "--model", env["model"], "--data", env["data"], "--compare-precisions",
             "--calib", env["calib"], "--json"])
    assert p.returncode == 0, p.stderr.decode()
    rows = {r["precision"]: r for r in json.loads(p.stdout)["rows"]}
    assert list(rows) == ["fp32", "bf16", "fp16", "int8", "fp8"]
    for prec in ("fp32", "bf16", "int8"):
        assert "skipped" not in rows[prec], rows[prec]
        assert rows[prec]["n"] == N
        assert rows[prec]["peak_rss_mb"] > 1 and rows[prec]["plan_mb"] > 0
    # The CPU backend has no FP16/FP8: listed with the backend's reason, not silently dropped.
    for prec in ("fp16", "fp8"):
        assert "not supported" in rows[prec]["skipped"], rows[prec]
    assert rows["fp32"]["intent_agreement"] == 1.0
    # FP32 and BF16 figures are what `hotline eval` gives on the folder directly.
    fp32, bf16 = direct(env, "fp32"), direct(env, "bf16")
    for prec, ref in (("fp32", fp32), ("bf16", bf16)):
        assert rows[prec]["intent_accuracy"] == pytest.approx(ref["intent_accuracy"], abs=1.01 / N)
        assert rows[prec]["slot_f1"] == pytest.approx(ref["slot_f1"], abs=0.01)
    agree = sum(a == b for a, b in zip(fp32["predicted"], bf16["predicted"])) / N
    assert rows["bf16"]["intent_agreement"] == pytest.approx(agree, abs=1.01 / N)
    assert 0.5 <= rows["int8"]["intent_agreement"] <= 1.0
    # Smaller weights make smaller plans (tiny model: metadata weighs more than in a real one).
    assert rows["int8"]["plan_mb"] < rows["bf16"]["plan_mb"] < rows["fp32"]["plan_mb"]


def test_compare_precisions_table_and_subset(env):
    p = run(["eval", "--model", env["model"], "--data", env["data"], "--compare-precisions",
             "--precisions", "int8", "--calib", env["calib"]])
    assert p.returncode == 0, p.stderr.decode()
    out = p.stdout.decode().splitlines()
    assert "agreement w/ fp32" in out[1] and "peak RSS MB" in out[1]
    assert [l.split()[0] for l in out[2:]] == ["fp32", "int8"]  # fp32 always, as the reference


def test_compare_precisions_int8_without_calibration_says_so(env):
    p = run(["eval", "--model", env["model"], "--data", env["data"], "--compare-precisions",
             "--precisions", "fp32,int8"])
    assert p.returncode == 0, p.stderr.decode()
    assert "int8" in p.stdout.decode() and "--calib" in p.stdout.decode()
