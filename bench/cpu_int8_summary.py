#!/usr/bin/env python3
"""Table for bench/cpu_int8_bench.sh: medians over repetitions per engine and case, the
PERFORMANCE.md INT8 ratios (C1, C3, M1) against both ONNX Runtime INT8 peers, A2 from the
--compare-precisions run, and the same figures as TSV lines (case, engine, metric, value, unit).

    python bench/cpu_int8_summary.py bench/out/int8-<stamp>
"""
import collections
import json
import os
import statistics
import sys

ENGINES = ["hotline_fp32", "hotline_int8", "ort_fp32", "ort_int8_dynamic", "ort_int8_static"]


def main():
    out = sys.argv[1]
    rows = collections.defaultdict(list)
    raw = os.path.join(out, "raw.jsonl")
    if os.path.exists(raw):
        for line in open(raw):
            if line.startswith("{"):
                d = json.loads(line)
                rows[(d["case"], d["engine"])].append(d)

    def med(case, engine, key):
        v = [(d["latency_ms"]["p50"] if key == "p50" else d[key])
             for d in rows.get((case, engine), [])]
        return statistics.median(v) if v else None

    def rng(case, engine, key):  # min-max over repetitions: the spread on a shared machine
        v = [(d["latency_ms"]["p50"] if key == "p50" else d[key])
             for d in rows.get((case, engine), [])]
        return f"{min(v):.3g}-{max(v):.3g}" if v else "n/a"

    tsv = []
    print("| batch x seq | engine | p50 latency ms | (range) | seq/s | (range) | peak RSS MB "
          "| reps |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for case in ("1x32", "32x32"):
        for e in ENGINES:
            if (case, e) not in rows:
                continue
            p50, sps, rss = med(case, e, "p50"), med(case, e, "seq_per_s"), med(case, e, "peak_rss_mb")
            print(f"| {case} | {e} | {p50:.3f} | {rng(case, e, 'p50')} | {sps:.1f} | "
                  f"{rng(case, e, 'seq_per_s')} | {rss:.1f} | {len(rows[(case, e)])} |")
            c = "b" + case.replace("x", "s")
            tsv += [(c, e, "latency_p50", p50, "ms"), (c, e, "throughput", sps, "seq/s"),
                    (c, e, "peak_rss", rss, "MB")]

    def ratio(a, b):
        return f"{a / b:.2f}" if a is not None and b else "n/a"

    print()
    print("| target | Hotline INT8 | vs ORT INT8 dynamic | vs ORT INT8 static | goal |")
    print("|---|---:|---:|---:|---|")
    for label, case, key, goal in (
            ("C1 small 1x32 latency (ratio of p50)", "1x32", "p50", "<= 0.7 (vs dynamic)"),
            ("C3 small 32x32 throughput (ratio of seq/s)", "32x32", "seq_per_s", ">= 1.5"),
            ("M1 small 1x32 peak RSS (ratio)", "1x32", "peak_rss_mb", "<= 1")):
        h = med(case, "hotline_int8", key)
        hs = f"{h:.3f}" if h is not None else "n/a"
        print(f"| {label} | {hs} | {ratio(h, med(case, 'ort_int8_dynamic', key))} | "
              f"{ratio(h, med(case, 'ort_int8_static', key))} | {goal} |")
    h32, o32 = med("1x32", "hotline_fp32", "peak_rss_mb"), med("1x32", "ort_fp32", "peak_rss_mb")
    print(f"| M1 FP32 peak RSS (ratio vs ORT FP32) | {h32} | {ratio(h32, o32)} | | <= 1 |")

    sizes = os.path.join(out, "sizes.txt")
    if os.path.exists(sizes):
        print("\nfile sizes (bytes):")
        for line in open(sizes):
            n, p = line.split()
            print(f"  {int(n):>12,d}  {os.path.basename(p)}")

    a2 = os.path.join(out, "a2.json")
    if os.path.exists(a2) and os.path.getsize(a2) > 0:
        j = json.load(open(a2))
        print(f"\nA2 on models/{j['model']}, {j['data']} (goal: INT8 intent agreement >= 99.5%, "
              "slot F1 within 0.5 points of FP32)")
        print("| precision | intent agreement w/ FP32 | intent accuracy | slot F1 | plan MB | "
              "peak RSS MB |")
        print("|---|---:|---:|---:|---:|---:|")
        fp32 = None
        for r in j["rows"]:
            if "skipped" in r:
                print(f"| {r['precision']} | not run: {r['skipped']} | | | | |")
                continue
            if r["precision"] == "fp32":
                fp32 = r
            print(f"| {r['precision']} | {100 * r['intent_agreement']:.2f}% | "
                  f"{r['intent_accuracy']:.4f} | {r['slot_f1']:.4f} | {r['plan_mb']:.2f} | "
                  f"{r['peak_rss_mb']:.1f} |")
            tsv += [("a2", "hotline_" + r["precision"], "intent_agreement",
                     100 * r["intent_agreement"], "%"),
                    ("a2", "hotline_" + r["precision"], "slot_f1", 100 * r["slot_f1"], "points")]
        for r in j["rows"]:
            if fp32 and "skipped" not in r and r["precision"] != "fp32":
                print(f"  {r['precision']}: slot F1 drop {100 * (fp32['slot_f1'] - r['slot_f1']):.2f} "
                      f"points, intent accuracy drop "
                      f"{100 * (fp32['intent_accuracy'] - r['intent_accuracy']):.2f} points, plan "
                      f"{100 * r['plan_mb'] / fp32['plan_mb']:.0f}% of FP32's")
    with open(os.path.join(out, "figures.tsv"), "w") as f:
        for t in tsv:
            f.write("\t".join(str(round(x, 4)) if isinstance(x, float) else str(x) for x in t) + "\n")


if __name__ == "__main__":
    main()
