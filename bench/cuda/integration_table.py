#!/usr/bin/env python3
"""Short Markdown table of scripts/device-check.sh's integration results (integration.json):
the engine/CLI path on the GPU (hotline perf, hotline serve + hotline bench, parity).

    integration_table.py integration.json
"""
import json
import sys


def f(v, nd=3):
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.{nd}f}"


def main():
    d = json.load(open(sys.argv[1]))
    rows = []
    if "tests" in d:
        rows.append(("CUDA tests", "pass" if d["tests"].get("status") == 0 else "FAIL", "all pass"))
    if "model" in d and "error" not in d["model"]:
        m = d["model"]
        rows.append(("model", f"{m.get('size')} {m.get('layers')}L h{m.get('hidden')} vocab "
                     f"{m.get('vocab')}, {m.get('intents')} intents", ""))
    for k, label in (("perf_1x64", "engine fp16 1x64 latency p50 (ms)"),
                     ("perf_128x64", "engine fp16 128x64 (seq/s)")):
        p = d.get(k)
        if not p:
            continue
        if "error" in p:
            rows.append((label, "error " + p["error"][:60], ""))
        elif k == "perf_1x64":
            rows.append((label, f"{f(p['latency_ms']['p50'])} (p99 {f(p['latency_ms']['p99'])})",
                         "G1 <= 0.20"))
        else:
            rows.append((label, f(p["seq_per_s"]), "G2 >= 45,000"))
    for c in (64, 128, 256):
        s = d.get(f"s2_c{c}")
        if not s:
            continue
        if "error" in s:
            rows.append((f"S2 serve, {c} callers", "error " + s["error"][:60], ""))
            continue
        ok = s["rps"] >= 20000 and s["latency_ms"]["p99"] <= 10
        rows.append((f"S2 serve fp16, {c} callers",
                     f"{f(s['rps'])} req/s, P99 {f(s['latency_ms']['p99'], 2)} ms, "
                     f"errors {s.get('errors', 0)}" + (" (met)" if ok else ""),
                     ">= 20,000 req/s, P99 <= 10 ms"))
    for key in sorted(k for k in d if k.startswith("g4_batcher_")):
        g = d[key]
        if "error" in g:
            rows.append((f"G4 batcher in-process ({key})", "error " + g["error"][:60], ""))
            continue
        rows.append((f"G4 batcher in-process fp16, {g['instances']} instances x batches of "
                     f"{g['max_batch']}, {g['requests']} requests "
                     f"(mean {g['mean_tokens']:.1f} tokens)",
                     f"{f(g['requests_per_s'])} req/s, p99 {f(g['latency_ms']['p99'], 2)} ms, "
                     f"mean batch {g['mean_batch']:.1f}, errors {g['errors']}"
                     + (" (met)" if g["requests_per_s"] >= 35000 else ""), "G4 >= 35,000 seq/s"))
    for key, what in (("parity", "base, random weights"), ("parity_default", "default model"),
                      ("parity_default_fp8", "default model"),
                      ("parity_default_int8", "default model")):
        parity_row(rows, d.get(key), what)
    print("\n| integration check | result | target |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


def parity_row(rows, p, what):
    if not p:
        return
    if "error" in p:
        rows.append((f"parity {what}", "error " + p["error"][:60], ""))
        return
    r = p["rel_err"]
    ref = p.get("reference", "fp32").split(" ")[0]
    prec = p.get("precision", "fp16")
    ties = sum(1 for x in p.get("disagreements", []) if x["ref_top2_margin"] < 1e-2)
    if prec in ("fp8", "int8"):  # PERFORMANCE.md A2: intent agreement >= 99.5%
        agree = p["intent_agree"] / max(1, p["n"])
        rows.append((f"parity {what}: {prec} vs {ref} fp32, {p['n']} inputs",
                     f"same intent {p['intent_agree']}/{p['n']} ({100 * agree:.2f}%), rel err "
                     f"intent {r['intent_logits']:.2e}, slots {r['slot_logits']:.2e}; slot argmax "
                     f"{100 * p['slot_argmax_agree']:.2f}% -> "
                     f"{'PASS' if agree >= 0.995 else 'FAIL'}", "A2 >= 99.5% same intent"))
        return
    rows.append((f"parity {what}: fp16 vs {ref} fp32, {p['n']} inputs",
                 f"rel err intent {r['intent_logits']:.2e}, slots {r['slot_logits']:.2e}; "
                 f"same intent {p['intent_agree']}/{p['n']} ({ties} of the others near-ties); "
                 f"slot argmax {100 * p['slot_argmax_agree']:.2f}% -> "
                 f"{'PASS' if p['pass'] else 'FAIL'}",
                 f"<= {p['tol']:g}, {p['n']}/{p['n']}"))


if __name__ == "__main__":
    main()
