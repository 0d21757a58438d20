#!/usr/bin/env python3
"""Side-by-side table of the CUDA encoder bench (hotline_cuda_bench JSON) and the PyTorch peers
(shared/peers/gpu/bench_peers.py results JSON) measured in the same device run.

  compare.py OURS.json PEERS.json [--summary OUT.json]   -> Markdown table on stdout
"""
import argparse
import json

# torch.compile max-autotune figures from PERFORMANCE.md (2026-11-30 run), used when not re-run.
COMPILE_DOC = {("base", "lat"): 0.704, ("base", "thr"): 28.7e3, ("small", "lat"): 0.279,
               ("small", "thr"): 240e3}
TARGETS = {("base", "lat"): ("G1", "<= 0.20 ms"), ("base", "thr"): ("G2", ">= 45k seq/s"),
           ("base", "mixed"): ("G4", ">= 35k seq/s"), ("base", "mem"): ("G5", "<= 350 MiB")}


def grid(peers, model, variant, b, s):
    for r in peers.get("grid", []) + peers.get("compile", {}).get("tasks", []):
        if (r.get("model") == model and r.get("variant") == variant and r.get("batch") == b
                and r.get("seq") == s and "median_ms" in r):
            return r
    return None


def mixed(peers, model, variant, mode):
    for r in peers.get("mixed", []):
        if r.get("model") == model and r.get("variant") == variant and r.get("mode") == mode \
                and "seq_per_s" in r:
            return r
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("peers")
    ap.add_argument("--summary")
    a = ap.parse_args()
    ours = json.load(open(a.ours))
    try:
        peers = json.load(open(a.peers))
    except Exception as e:  # noqa: BLE001
        peers = {"error": repr(e)}
    rows, summary = [], {"env": ours.get("env"), "cases": []}

    def add(model, case, unit, ours_v, eager, graph, comp, comp_src, higher_better):
        cands = [v for v in (eager, graph, comp) if v is not None]
        best = (max(cands) if higher_better else min(cands)) if cands else None
        ratio = None
        if best is not None and ours_v:
            ratio = ours_v / best if higher_better else best / ours_v
        tgt = TARGETS.get((model, case))
        rec = {"model": model, "case": case, "unit": unit, "hotline": ours_v, "eager_fp16": eager,
               "cudagraph_fp16": graph, "compile": comp, "compile_source": comp_src,
               "best_peer": best, "speedup_vs_best_peer": ratio,
               "target": tgt[0] + " " + tgt[1] if tgt else None}
        summary["cases"].append(rec)
        f = (lambda v: "-" if v is None else (f"{v:,.0f}" if v > 100 else f"{v:.3f}"))
        rows.append(f"| {model} | {case} ({unit}) | {f(ours_v)} | {f(eager)} | {f(graph)} | "
                    f"{f(comp)}{'*' if comp_src == 'doc' and comp is not None else ''} | "
                    f"{'-' if ratio is None else f'{ratio:.2f}x'} | {rec['target'] or ''} |")

    for model in ("base", "small"):
        m = ours.get(model)
        if not m:
            continue
        for case, b, key, unit in (("lat", 1, "median_ms", "ms, 1x64"),
                                   ("thr", 128, "seq_per_s", "seq/s, 128x64")):
            src = m["latency_1x64" if case == "lat" else "throughput_128x64"]
            e = grid(peers, model, "eager_fp16_sdpa", b, 64)
            g = grid(peers, model, "cudagraph_fp16_sdpa", b, 64)
            c = grid(peers, model, "compile_fp16_max-autotune", b, 64)
            comp, comp_src = (c[key], "run") if c else (COMPILE_DOC.get((model, case)), "doc")
            add(model, case, unit, src[key], e and e[key], g and g[key], comp, comp_src,
                case == "thr")
        e = mixed(peers, model, "eager_fp16_sdpa", "batch32_pad_to_max")
        g = mixed(peers, model, "cudagraph_fp16_sdpa", "batch32_pad_to_max_bucket8")
        add(model, "mixed", "seq/s, 1024 req, ours packed b128", m["mixed_1024_b128"]["seq_per_s"],
            e and e["seq_per_s"], g and g["seq_per_s"], None, None, True)
        add(model, "mixed32", "seq/s, 1024 req, ours packed b32", m["mixed_1024_b32"]["seq_per_s"],
            e and e["seq_per_s"], g and g["seq_per_s"], None, None, True)
        pe = grid(peers, model, "eager_fp16_sdpa", 128, 128)
        pg = grid(peers, model, "cudagraph_fp16_sdpa", 128, 128)
        add(model, "mem", "MiB, weights + context at 128x128", m["memory"]["allocated_mib"],
            pe and pe.get("peak_over_pre_model_mib"), pg and pg.get("peak_over_pre_model_mib"),
            None, None, False)
    print("| model | case | hotline | eager fp16 | CUDA graph fp16 | torch.compile | vs best peer | target |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))
    print("\n(* torch.compile max-autotune from PERFORMANCE.md's 2026-11-30 run, not re-run here; "
          "mem: ours = our device allocations, peers = torch peak over the pre-model allocation)")
    if a.summary:
        json.dump(summary, open(a.summary, "w"), indent=1)


if __name__ == "__main__":
    main()
