#!/usr/bin/env python3
"""Table for bench/cpu_bench.sh: median over repetitions of each engine's p50, seq/s, peak RSS,
and the PERFORMANCE.md ratios against ONNX Runtime FP32 (plain graph and optimizer graph).

    python bench/cpu_summary.py bench/out/<stamp>/raw.jsonl
"""
import collections
import json
import statistics
import sys

ENGINES = ["hotline_fp32", "hotline_bf16", "ort", "ort_nospin", "ort_opt", "torch", "torch_bf16"]


def main():
    rows = collections.defaultdict(list)
    for line in open(sys.argv[1]):
        line = line.strip()
        if line.startswith("{"):
            d = json.loads(line)
            rows[(d["size"], d["case"], d["engine"])].append(d)

    def med(size, case, engine, key):
        v = [(d["latency_ms"]["p50"] if key == "p50" else d[key])
             for d in rows.get((size, case, engine), [])]
        return statistics.median(v) if v else None

    cases = sorted({(s, c) for (s, c, _) in rows}, key=lambda x: (x[0] != "small", x[1]))
    print("| model | batch x seq | engine | p50 latency ms | seq/s | peak RSS MB | reps |")
    print("|---|---|---|---:|---:|---:|---:|")
    for s, c in cases:
        for e in ENGINES:
            if (s, c, e) not in rows:
                continue
            print(f"| {s} | {c} | {e} | {med(s, c, e, 'p50'):.3f} | "
                  f"{med(s, c, e, 'seq_per_s'):.1f} | {med(s, c, e, 'peak_rss_mb'):.1f} | "
                  f"{len(rows[(s, c, e)])} |")

    def ratio(a, b):
        return f"{a / b:.2f}" if a is not None and b else "n/a"

    print()
    print("| target | measured | vs ORT plain | vs ORT plain, no spin | vs ORT optimizer | goal |")
    print("|---|---|---:|---:|---:|---|")
    for peer_note, (num, key, goal, inverse) in {
        "C1 small 1x32 latency, Hotline BF16 / ORT FP32": ("hotline_bf16", "p50", "<= 0.5", False),
        "C1' small 1x32 latency, Hotline FP32 / ORT FP32": ("hotline_fp32", "p50", "(info)", False),
        "C2 small 32x32 throughput, Hotline BF16 / ORT FP32": ("hotline_bf16", "seq_per_s", ">= 2", False),
        "C2' small 32x32 throughput, Hotline FP32 / ORT FP32": ("hotline_fp32", "seq_per_s", "(info)", False),
        "M1 small 1x32 peak RSS, Hotline FP32 / ORT FP32": ("hotline_fp32", "peak_rss_mb", "<= 1", False),
    }.items():
        case = "32x32" if "32x32" in peer_note else "1x32"
        ours = med("small", case, num, key)
        print(f"| {peer_note} | {ours if ours is not None else 'n/a'} | "
              f"{ratio(ours, med('small', case, 'ort', key))} | "
              f"{ratio(ours, med('small', case, 'ort_nospin', key))} | "
              f"{ratio(ours, med('small', case, 'ort_opt', key))} | {goal} |")
    ours = med("base", "1x32", "hotline_bf16", "p50")
    print(f"| base 1x32 latency, Hotline BF16 / ORT FP32 | {ours if ours is not None else 'n/a'} | "
          f"{ratio(ours, med('base', '1x32', 'ort', 'p50'))} | "
          f"{ratio(ours, med('base', '1x32', 'ort_nospin', 'p50'))} | "
          f"{ratio(ours, med('base', '1x32', 'ort_opt', 'p50'))} | (info) |")


if __name__ == "__main__":
    main()
