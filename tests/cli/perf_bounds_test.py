"""`hotline perf` refuses a shape outside the plan's profile before it builds the batch (issue 23:
--batch and --seq at 2^31-1 hung filling token ids)."""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOTLINE = os.environ.get("HOTLINE_BIN", str(ROOT / "build" / "hotline"))
ONNX = ROOT / "tests" / "fixtures" / "nlu" / "tiny_model" / "model.onnx"


def test_perf_refuses_shapes_past_the_profile_at_once(tmp_path):
    plan = tmp_path / "tiny.plan"
    subprocess.run([HOTLINE, "build", "--onnx", str(ONNX), "--precision", "fp32", "--backend",
                    "cpu", "--profile", "1x1:4x16:8x64", "-o", str(plan)],
                   check=True, capture_output=True, timeout=300)
    big = str(2**31 - 1)
    for batch, seq in [(big, "16"), ("2", big), (big, big)]:
        p = subprocess.run([HOTLINE, "perf", "--plan", str(plan), "--batch", batch, "--seq", seq,
                            "--iters", "1"], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0, p.stdout
        assert "profile" in p.stderr and ("8" in p.stderr or "64" in p.stderr), p.stderr
    ok = subprocess.run([HOTLINE, "perf", "--plan", str(plan), "--batch", "8", "--seq", "64",
                         "--iters", "2"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
