"""`hotline build --backend cuda --precision int8`: the options that do not apply to the CUDA
INT8 encoder are refused by name before any backend is touched (so this runs without a GPU),
the ones that do apply (every --calib-method, --calib-cache) pass those checks, and the CPU INT8
build keeps its --keep-fp. The GPU half (plans built, loaded, compared with FP32) is
tests/engine/cuda/backend_quant_test.cc."""
import os
import shutil

import pytest

from cli_util import ROOT, TINY, head, run

PROFILE = "1x1:4x16:16x64"  # the tiny model has 64 positions


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("cuda_int8")
    model = str(d / "tiny_model")
    shutil.copytree(TINY, model)
    calib = head(os.path.join(ROOT, "data/hotline/calib.jsonl"), str(d / "calib.jsonl"), 40)
    data = head(os.path.join(ROOT, "data/hotline/test.jsonl"), str(d / "data.jsonl"), 20)
    return {"dir": str(d), "model": model, "calib": calib, "data": data}


def cuda_int8(env, *extra, out="x.plan"):
    path = os.path.join(env["dir"], out)
    if os.path.exists(path):
        os.remove(path)
    p = run(["build", "--onnx", env["model"], "--backend", "cuda", "--precision", "int8",
             "--calib", env["calib"], "--no-tune", "--profile", PROFILE, "-o", path, *extra])
    return p, p.stderr.decode(), path


def test_keep_fp_and_gate_are_refused_naming_the_cpu_backend(env):
    p, err, out = cuda_int8(env, "--keep-fp", "layer:0")
    assert p.returncode != 0 and "--keep-fp applies to --backend cpu" in err, err
    assert not os.path.exists(out)
    p, err, out = cuda_int8(env, "--gate", env["data"])
    assert p.returncode != 0 and "--gate applies to --backend cpu" in err, err
    assert not os.path.exists(out)


def test_fp8_options_stay_fp8_only(env):
    for extra in (["--fp8-weight-scaling", "per_channel"], ["--fp8-fast-accum-max-k", "0"]):
        p, err, _ = cuda_int8(env, *extra)
        assert p.returncode != 0 and "--precision fp8 --backend cuda" in err, err


@pytest.mark.parametrize("method", ["kl", "percentile", "minmax"])
def test_every_calib_method_passes_the_option_checks(env, method):
    """No method is refused or swapped for cuda int8: past the option checks the build either
    succeeds (a GPU here) or fails on the backend itself (no GPU, or a build without CUDA)."""
    cache = os.path.join(env["dir"], method + ".calib")
    p, err, out = cuda_int8(env, "--calib-method", method, "--calib-cache", cache,
                            out=method + ".plan")
    for refusal in ("calibrated by minmax", "--calib-method", "--calib-cache", "only used with"):
        assert refusal not in err, err
    if p.returncode == 0:
        assert os.path.exists(out)
    else:
        assert "backend cuda is not built" in err or "no usable GPU" in err, err


def test_cpu_int8_keeps_its_keep_fp(env):
    out = os.path.join(env["dir"], "cpu.plan")
    p = run(["build", "--onnx", env["model"], "--precision", "int8", "--calib", env["calib"],
             "--no-tune", "--profile", PROFILE, "--keep-fp", "layer:0", "-o", out])
    assert p.returncode == 0, p.stderr.decode()
    assert os.path.exists(out)


def fp8_build(env, *extra, backend="cuda"):
    path = os.path.join(env["dir"], "fp8.plan")
    if os.path.exists(path):
        os.remove(path)
    p = run(["build", "--onnx", env["model"], "--backend", backend, "--precision", "fp8",
             "--calib", env["calib"], "--no-tune", "--profile", PROFILE, "-o", path, *extra])
    return p, p.stderr.decode(), path


def test_fp8_options_are_checked_before_any_backend(env):
    """--fp8-weight-scaling / --fp8-fast-accum-max-k: bad values and the wrong backend are
    refused by name (before any backend is touched); good ones pass the checks."""
    p, err, out = fp8_build(env, "--fp8-weight-scaling", "per_row")
    assert p.returncode != 0 and "want per_tensor or per_channel" in err, err
    assert not os.path.exists(out)
    p, err, out = fp8_build(env, "--fp8-fast-accum-max-k", "-5")
    assert p.returncode != 0 and "must be >= 0" in err, err
    p, err, out = fp8_build(env, "--fp8-weight-scaling", "per_channel", backend="cpu")
    assert p.returncode != 0 and "--precision fp8 --backend cuda" in err, err
    p, err, out = fp8_build(env, "--fp8-weight-scaling", "per_channel",
                            "--fp8-fast-accum-max-k", "1024")
    for refusal in ("want per_tensor", "must be >= 0", "--precision fp8 --backend cuda"):
        assert refusal not in err, err
    if p.returncode == 0:  # a GPU with FP8 here: the plan records the choices
        assert os.path.exists(out)
