"""The accuracy gate of `hotline build --precision int8 --gate ...` on the tiny NLU fixture model
(tests/fixtures/nlu/tiny_model, trained briefly on the project's taxonomy), gated on the first
utterances of data/hotline/test.jsonl and calibrated on data/hotline/calib.jsonl.

The gate's figures are checked against `hotline eval` run independently: on the model folder (FP32
built from the ONNX through Pipeline::Open) and on the plan the gate wrote (a plan-only copy of the
folder), with intent agreement recomputed here from the two runs' predictions.
"""
import json
import os
import shutil

import pytest

from cli_util import ROOT, TINY, head, run

N_GATE = 300
N_CALIB = 100


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("gate")
    model = str(d / "tiny_model")
    shutil.copytree(TINY, model)
    data = head(os.path.join(ROOT, "data/hotline/test.jsonl"), str(d / "gate.jsonl"), N_GATE)
    calib = head(os.path.join(ROOT, "data/hotline/calib.jsonl"), str(d / "calib.jsonl"), N_CALIB)
    # FP32 reference, independently of the gate: the pipeline builds from the ONNX itself.
    pred = str(d / "fp32.pred")
    p = run(["eval", "--model", model, "--data", data, "--json", "--predictions", pred])
    assert p.returncode == 0, p.stderr.decode()
    fp32 = json.loads(p.stdout)
    fp32["predicted"] = open(pred).read().split()
    return {"dir": str(d), "model": model, "data": data, "calib": calib, "fp32": fp32}


def gate(env, name, *extra):
    out = os.path.join(env["dir"], name + ".plan")
    report = os.path.join(env["dir"], name + ".json")
    if os.path.exists(out):
        os.remove(out)
    p = run(["build", "--onnx", env["model"], "--precision", "int8", "--calib", env["calib"],
             "--no-tune", "--gate", env["data"], "--gate-report", report, "-o", out, *extra])
    rep = json.load(open(report)) if os.path.exists(report) else None
    return p, out, rep


def eval_plan(env, plan, name):
    """`hotline eval` on a plan-only copy of the model folder holding exactly `plan`."""
    folder = os.path.join(env["dir"], name + "_folder")
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(env["model"], folder, ignore=shutil.ignore_patterns("model.onnx", "cache"))
    os.makedirs(os.path.join(folder, "cache"))
    shutil.copy(plan, os.path.join(folder, "cache", "tiny-int8-cpu-0.plan"))
    pred = os.path.join(env["dir"], name + ".pred")
    p = run(["eval", "--model", folder, "--data", env["data"], "--precision", "int8", "--json",
             "--predictions", pred])
    assert p.returncode == 0, p.stderr.decode()
    res = json.loads(p.stdout)
    res["predicted"] = open(pred).read().split()
    return res


def plan_ops(plan):
    p = run(["inspect", "--json", plan])
    assert p.returncode == 0, p.stderr.decode()
    return json.loads(p.stdout)["ops"]


def agreement(a, b):
    assert len(a) == len(b) == N_GATE
    return sum(x == y for x, y in zip(a, b)) / len(a)


def test_loose_gate_passes_with_everything_int8(env):
    p, out, rep = gate(env, "loose", "--max-intent-drop", "100", "--max-slot-f1-drop", "100")
    assert p.returncode == 0, p.stderr.decode()
    assert rep["passed"] and rep["keep_fp"] == [] and len(rep["steps"]) == 1
    # The gate's FP32 figures are `hotline eval`'s (its own FP32 build may pick other GEMM
    # tactics, whose rounding could at most flip a near tie: one utterance).
    assert rep["fp32"]["intent_accuracy"] == pytest.approx(env["fp32"]["intent_accuracy"],
                                                           abs=1.01 / N_GATE)
    assert rep["fp32"]["slot_f1"] == pytest.approx(env["fp32"]["slot_f1"], abs=0.01)
    # The plan it wrote scores what the gate said, and agrees with FP32 as often as it said.
    res = eval_plan(env, out, "loose")
    step = rep["steps"][-1]
    assert step["intent_accuracy"] == pytest.approx(res["intent_accuracy"], abs=1e-9)
    assert step["slot_f1"] == pytest.approx(res["slot_f1"], abs=1e-9)
    assert step["intent_agreement"] == pytest.approx(
        agreement(env["fp32"]["predicted"], res["predicted"]), abs=1e-9)
    dense = [op for op in plan_ops(out) if op["type"] in ("Dense", "DenseLayerNorm")]
    assert dense and all(op["precision"] == "int8" for op in dense)


def test_tight_gate_moves_layers_back_until_it_passes(env):
    p, out, rep = gate(env, "tight", "--max-intent-drop", "0", "--max-slot-f1-drop", "0",
                       "--min-intent-agreement", "100")
    assert p.returncode == 0, p.stderr.decode()
    assert not rep["steps"][0]["passed"], "all-INT8 already agrees 100%: the gate is not tight"
    assert rep["passed"] and rep["keep_fp"], rep
    assert len(rep["steps"]) >= 2
    final = [s for s in rep["steps"] if s["passed"]][-1]
    assert final["keep_fp"] == rep["keep_fp"] and final["intent_agreement"] == 1.0
    # Sensitivity ranking: every quantisable GEMM once, in falling relative error.
    errs = [s["rel_err"] for s in rep["sensitivity"]]
    assert errs == sorted(errs, reverse=True) and len(errs) >= 4
    # The plan written keeps exactly the named GEMMs in fp32.
    ops = {op["name"]: op["precision"] for op in plan_ops(out)
           if op["type"] in ("Dense", "DenseLayerNorm")}
    kept = set(rep["keep_fp"]) - {"embeddings"}
    assert kept <= set(ops), (kept, ops)
    for name, prec in ops.items():
        assert prec == ("fp32" if name in kept else "int8"), (name, prec)
    res = eval_plan(env, out, "tight")
    assert agreement(env["fp32"]["predicted"], res["predicted"]) == 1.0
    assert res["intent_accuracy"] >= env["fp32"]["intent_accuracy"] - 1e-12


def test_gate_that_cannot_pass_fails_naming_the_layers(env):
    p, out, rep = gate(env, "fail", "--max-intent-drop", "0", "--max-slot-f1-drop", "0",
                       "--min-intent-agreement", "100", "--gate-max-fp", "0")
    assert p.returncode == 3, p.stderr.decode()
    assert not os.path.exists(out)
    assert rep is not None and not rep["passed"]
    err = p.stderr.decode()
    assert "FAILED" in err
    assert rep["sensitivity"][0]["node"] in err  # the most sensitive layer is named


def test_gate_bad_use(env, tmp_path):
    p = run(["build", "--onnx", env["model"], "--precision", "fp32", "--gate", env["data"],
             "-o", str(tmp_path / "x.plan")])
    assert p.returncode != 0 and b"int8" in p.stderr
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(os.path.join(env["model"], "model.onnx"), lone / "model.onnx")
    shutil.copy(os.path.join(env["model"], "vocab.txt"), lone / "vocab.txt")
    p = run(["build", "--onnx", str(lone / "model.onnx"), "--precision", "int8", "--calib",
             env["calib"], "--gate", env["data"], "-o", str(tmp_path / "x.plan")])
    assert p.returncode != 0 and b"model.yaml" in p.stderr


def test_fp8_takes_only_minmax_calibration(env):
    """FP8 plans are calibrated by amax: another --calib-method is refused by name, not ignored;
    minmax (and no method) pass that check and reach the backend's own answer."""
    out = os.path.join(env["dir"], "fp8.plan")
    for method in ("kl", "percentile"):
        p = run(["build", "--onnx", env["model"], "--precision", "fp8", "--calib-method", method,
                 "--calib", env["calib"], "-o", out])
        err = p.stderr.decode()
        assert p.returncode != 0 and "calibrated by minmax" in err and method in err, err
    for extra in (["--calib-method", "minmax"], []):
        p = run(["build", "--onnx", env["model"], "--precision", "fp8", "--calib", env["calib"],
                 "-o", out, *extra])
        err = p.stderr.decode()
        # Past the method check, the CPU backend gives its own answer: no FP8 there.
        assert "calibrated by minmax" not in err, err
        assert p.returncode != 0 and "fp8 is not supported on cpu backend" in err, err
