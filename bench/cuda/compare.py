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
           ("base", "lat-dev"): ("G1", "<= 0.20 ms"), ("base", "thr-dev"): ("G2", ">= 45k seq/s"),
           ("base", "mixed"): ("G4", ">= 35k seq/s"), ("base", "mem"): ("G5", "<= 350 MiB"),
           ("base_fp8", "thr"): ("G3", ">= 65k seq/s"),
           ("base_int8", "thr"): ("G3", ">= 65k seq/s"),
           ("base_fp8", "mem"): ("G5", "<= 200 MiB"), ("base_int8", "mem"): ("G5", "<= 200 MiB"),
           ("base_fp8_noqout", "thr"): ("G3", ">= 65k seq/s"),
           ("base_fp8_pertensor", "thr"): ("G3", ">= 65k seq/s"),
           ("base_fp8_fastacc", "thr"): ("G3", ">= 65k seq/s")}


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

    def add(model, case, unit, ours_v, eager, graph, comp, comp_src, higher_better, doc=None):
        cands = [v for v in (eager, graph, comp, doc) if v is not None]
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

    for model in ("base", "small", "base_fp8", "base_fp8_unchunked", "base_fp8_pertensor",
                  "base_fp8_fastacc",
                  "base_fp8_noqout", "base_int8"):
        m = ours.get(model)
        if not m:
            continue
        if "error" in m:  # a quantised row that could not run
            rows.append(f"| {model} | error | {m['error'][:80]} | | | | | |")
            continue
        peer_model = model.split("_")[0]  # the peers run FP16 only: quantised rows vs FP16 peers
        for case, b, key, unit in (("lat", 1, "median_ms", "ms, 1x64"),
                                   ("thr", 128, "seq_per_s", "seq/s, 128x64")):
            src = m["latency_1x64" if case == "lat" else "throughput_128x64"]
            e = grid(peers, peer_model, "eager_fp16_sdpa", b, 64)
            g = grid(peers, peer_model, "cudagraph_fp16_sdpa", b, 64)
            c = (grid(peers, peer_model, "compile_fp16_max-autotune", b, 64)
                 or grid(peers, peer_model, "compile_fp16_reduce-overhead", b, 64))
            comp, comp_src = (c[key], "run") if c else (COMPILE_DOC.get((peer_model, case)), "doc")
            # The best peer also counts PERFORMANCE.md's max-autotune figure when this run
            # measured torch.compile in a faster-to-compile mode only.
            doc = COMPILE_DOC.get((peer_model, case))
            add(model, case, unit, src[key], e and e[key], g and g[key], comp, comp_src,
                case == "thr", doc)
            # The same Runs timed as the peers are (CUDA events on the device, outputs left on
            # the GPU by the peers; ours still include the host copies inside the graph).
            dkey = "device_median_ms" if case == "lat" else "device_seq_per_s"
            if dkey in src:
                add(model, case + "-dev", unit + ", CUDA events", src[dkey], e and e[key],
                    g and g[key], comp, comp_src, case == "thr", doc)
        e = mixed(peers, peer_model, "eager_fp16_sdpa", "batch32_pad_to_max")
        g = mixed(peers, peer_model, "cudagraph_fp16_sdpa", "batch32_pad_to_max_bucket8")
        add(model, "mixed", "seq/s, 1024 req, ours packed b128", m["mixed_1024_b128"]["seq_per_s"],
            e and e["seq_per_s"], g and g["seq_per_s"], None, None, True)
        add(model, "mixed32", "seq/s, 1024 req, ours packed b32", m["mixed_1024_b32"]["seq_per_s"],
            e and e["seq_per_s"], g and g["seq_per_s"], None, None, True)
        pe = grid(peers, peer_model, "eager_fp16_sdpa", 128, 128)
        pg = grid(peers, peer_model, "cudagraph_fp16_sdpa", 128, 128)
        add(model, "mem", "MiB, weights + context at 128x128", m["memory"]["allocated_mib"],
            pe and pe.get("peak_over_pre_model_mib"), pg and pg.get("peak_over_pre_model_mib"),
            None, None, False)
    print("| model | case | hotline | eager fp16 | CUDA graph fp16 | torch.compile | vs best peer | target |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))
    print("\n(torch.compile: this run's figure (max-autotune, else reduce-overhead); * "
          "max-autotune from PERFORMANCE.md's 2026-11-30 run where this run has none; the best "
          "peer always includes that documented max-autotune figure; "
          "mem: ours = our device allocations, peers = torch peak over the pre-model allocation; "
          "base_fp8 / base_int8: our quantised encoder against the FP16 peers)")
    if a.summary:
        json.dump(summary, open(a.summary, "w"), indent=1)


if __name__ == "__main__":
    main()
