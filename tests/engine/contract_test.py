"""The command-line contract of `hotline build`, `inspect --json`, `infer` and `perf` (README,
"Bring your own model") on the tiny fixture: the JSON keys each subcommand prints, and `infer`'s
numbers against ONNX Runtime on the same padded batch."""
import json
import os
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

HOTLINE = os.environ.get("HOTLINE_BIN", "hotline")
HERE = os.path.dirname(os.path.abspath(__file__))
ONNX = os.path.join(HERE, "..", "fixtures", "engine", "contract_tiny.onnx")
FEEDS = {"input_ids": [[101, 2000, 2001, 102], [101, 2002, 102, 0]],
         "attention_mask": [[1, 1, 1, 1], [1, 1, 1, 0]],
         "token_type_ids": [[0, 0, 0, 0], [0, 0, 0, 0]]}


def run(*args):
    p = subprocess.run([HOTLINE, *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"hotline {' '.join(args)} failed: {p.stderr}"
    return p.stdout


def last_json(text):
    lines = [l for l in text.strip().splitlines() if l.strip().startswith("{")]
    assert lines, f"no JSON line in {text!r}"
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("contract") / "m.plan")
    run("build", "--onnx", ONNX, "--precision", "fp32", "--backend", "cpu",
        "--profile", "1x1:4x32:8x64", "-o", path)
    assert os.path.getsize(path) > 0
    return path


def test_inspect_json_keys(plan):
    j = last_json(run("inspect", plan, "--json"))
    for key in ["format_version", "fingerprint", "precision", "ops", "mode", "inputs", "outputs"]:
        assert key in j, key
    assert j["kind"] == "plan" and j["precision"] == "fp32" and j["backend"] == "cpu"
    assert isinstance(j["format_version"], int) and j["fingerprint"]
    assert j["ops"] and all({"name", "type", "precision"} <= set(o) for o in j["ops"])
    assert j["mode"] == "packed"  # the fixture is a plain encoder: it must fuse
    assert sorted(j["inputs"]) == sorted(FEEDS)


def test_infer_matches_onnxruntime(plan, tmp_path):
    inp, outp = tmp_path / "in.json", tmp_path / "out.json"
    inp.write_text(json.dumps(FEEDS))
    run("infer", "--plan", plan, "--input", str(inp), "--output", str(outp))
    got = json.loads(outp.read_text())
    sess = ort.InferenceSession(ONNX, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    want = sess.run(names, {k: np.array(v, dtype=np.int64) for k, v in FEEDS.items()})
    assert sorted(got) == sorted(names)
    mask = np.array(FEEDS["attention_mask"], dtype=bool)
    for name, w in zip(names, want):
        g = np.array(got[name], dtype=np.float64)
        assert g.shape == w.shape, name
        if w.ndim >= 2 and w.shape[:2] == mask.shape:  # per token: padded rows are unspecified
            g, w = g[mask], w[mask]
        err = np.abs(g - w).max() / max(np.abs(w).max(), 1e-6)
        assert err <= 1e-4, f"{name}: relative error {err:.2e}"


def test_perf_json_keys(plan):
    j = last_json(run("perf", "--plan", plan, "--batch", "2", "--seq", "16", "--iters", "5"))
    assert j["batch"] == 2 and j["seq"] == 16 and j["iters"] == 5
    lat = j["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"]
    assert j["seq_per_s"] > 0 and j["peak_rss_mb"] > 0


def test_bad_input_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    p = subprocess.run([HOTLINE, "build", "--onnx", str(bad), "-o", str(tmp_path / "x.plan")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "not a valid ONNX model" in p.stderr
