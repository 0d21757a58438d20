#!/usr/bin/env python3
"""CPU peers for bench/cpu_bench.sh: one peer, one case, one process (so peak RSS is that case's).

    python bench/cpu_peers.py --peer ort|ort_opt|torch|torch_bf16 --size small --batch 1 --seq 32
        [--threads 2] [--iters 200] [--warmup 20] [--models bench/models]
    python bench/cpu_peers.py --prepare-ort-opt --size small     (writes <size>_ort_opt.onnx)

Peers:
  ort         ONNX Runtime, the plain exported graph, graph optimisation level ALL
  ort_nospin  the same with intra-op spinning off (session.intra_op.allow_spinning=0), ONNX
              Runtime's counterpart of OMP_WAIT_POLICY=passive
  ort_opt     ONNX Runtime on the graph after onnxruntime.transformers.optimizer
              (model_type bert, num_heads, hidden_size: attention, LayerNorm, GELU fusions)
  torch       PyTorch eager FP32 (bench/make_models.py's module, same weights as the ONNX)
  torch_bf16  PyTorch eager under torch.cpu.amp.autocast(dtype=torch.bfloat16)

Prints one JSON line shaped like `hotline perf`'s:
  {"peer", "size", "batch", "seq", "iters", "latency_ms": {"p50", "p90", "p99"}, "seq_per_s",
   "peak_rss_mb"}
Inputs: batch x seq random token ids (all real tokens, mask all ones, token types 0), as
`hotline perf` feeds.
"""
import argparse
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = {"small": dict(heads=4, hidden=256), "base": dict(heads=12, hidden=768)}


def inputs_np(batch, seq):
    import numpy as np
    rng = np.random.default_rng(7)
    ids = rng.integers(672, 8000, size=(batch, seq), dtype=np.int64)
    ids[:, 0] = 101
    ids[:, -1] = 102
    return {"input_ids": ids, "attention_mask": np.ones((batch, seq), np.int64),
            "token_type_ids": np.zeros((batch, seq), np.int64)}


def onnx_path(models, size):
    for name in (f"{size}_op17.onnx", f"{size}_op14.onnx", f"{size}.onnx"):
        p = os.path.join(models, name)
        if os.path.exists(p):
            return p
    sys.exit(f"cpu_peers: no ONNX model for {size} in {models} (run bench/make_models.py)")


def prepare_ort_opt(models, size):
    from onnxruntime.transformers import optimizer
    cfg = CONFIGS[size]
    out = os.path.join(models, f"{size}_ort_opt.onnx")
    m = optimizer.optimize_model(onnx_path(models, size), model_type="bert",
                                 num_heads=cfg["heads"], hidden_size=cfg["hidden"])
    m.save_model_to_file(out)
    print(json.dumps({"prepared": out, "fused_ops": m.get_fused_operator_statistics()}))


def ort_runner(path, threads, spin=True):
    import onnxruntime as ort
    so = ort.SessionOptions()
    if not spin:  # idle workers sleep instead of spinning: better on an oversubscribed machine
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}

    def run(feed):
        return sess.run(None, {k: v for k, v in feed.items() if k in names})
    return run


def torch_runner(models, size, threads, bf16):
    import torch
    sys.path.insert(0, HERE)
    from make_models import build  # noqa: E402
    torch.set_num_threads(threads)
    m = build(size)
    m.load_state_dict(torch.load(os.path.join(models, f"{size}.pt")))
    m.eval()

    def run(feed):
        t = {k: torch.from_numpy(v) for k, v in feed.items()}
        with torch.inference_mode():
            if bf16:
                with torch.cpu.amp.autocast(dtype=torch.bfloat16):
                    out = m(t["input_ids"], t["attention_mask"], t["token_type_ids"])
                return tuple(o.float() for o in out)
            return m(t["input_ids"], t["attention_mask"], t["token_type_ids"])
    return run


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def measure_and_print(run, a):
    """Warm up, time a.iters runs (at most a.max_seconds once 10 are done) of one batch of
    a.batch x a.seq, and print one JSON line: latency percentiles, seq/s at p50, peak RSS."""
    feed = inputs_np(a.batch, a.seq)
    for _ in range(a.warmup):
        run(feed)
    ts = []
    t0 = time.perf_counter()
    for _ in range(a.iters):
        t = time.perf_counter()
        run(feed)
        ts.append((time.perf_counter() - t) * 1e3)
        if time.perf_counter() - t0 > a.max_seconds and len(ts) >= 10:
            break
    p50 = pct(ts, 0.5)
    print(json.dumps({
        "peer": a.peer, "size": a.size, "batch": a.batch, "seq": a.seq, "iters": len(ts),
        "latency_ms": {"p50": round(p50, 4), "p90": round(pct(ts, 0.9), 4),
                       "p99": round(pct(ts, 0.99), 4)},
        "seq_per_s": round(a.batch / (p50 / 1e3), 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", choices=["ort", "ort_opt", "ort_nospin", "torch", "torch_bf16"])
    ap.add_argument("--size", default="small", choices=sorted(CONFIGS))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--models", default=os.path.join(HERE, "models"))
    ap.add_argument("--prepare-ort-opt", action="store_true")
    a = ap.parse_args()
    if a.prepare_ort_opt:
        prepare_ort_opt(a.models, a.size)
        return
    if a.peer is None:
        ap.error("--peer is required")
    if a.peer in ("ort", "ort_nospin"):
        run = ort_runner(onnx_path(a.models, a.size), a.threads, spin=a.peer == "ort")
    elif a.peer == "ort_opt":
        p = os.path.join(a.models, f"{a.size}_ort_opt.onnx")
        if not os.path.exists(p):
            sys.exit(f"cpu_peers: {p} missing (run with --prepare-ort-opt first)")
        run = ort_runner(p, a.threads)
    else:
        run = torch_runner(a.models, a.size, a.threads, a.peer == "torch_bf16")
    measure_and_print(run, a)


if __name__ == "__main__":
    main()
