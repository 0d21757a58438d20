#!/usr/bin/env python3
"""ONNX Runtime INT8 peers for bench/cpu_int8_bench.sh (PERFORMANCE.md C1, C3, M1 in INT8).

    python bench/cpu_int8_peers.py --prepare --size small [--models bench/models]
        [--calib data/hotline/calib.jsonl] [--vocab models/default/vocab.txt] [--calib-lines 400]
    python bench/cpu_int8_peers.py --peer ort_fp32|ort_int8_dynamic|ort_int8_static
        --size small --batch 1 --seq 32 [--threads 2] [--iters 200]

--prepare writes, beside <size>_op17.onnx:
  <size>_int8_dynamic.onnx  onnxruntime.quantization.quantize_dynamic, INT8 weights (QInt8, per
                            tensor, as ORT's own quantiser writes by default: MatMulInteger +
                            DynamicQuantizeLinear, activation scales computed at run time)
  <size>_int8_static.onnx   onnxruntime.quantization.quantize_static, QDQ format (ORT's default:
                            S8 activations and weights), MinMax calibration over the "text" of
                            --calib tokenised with --vocab (the same call text and vocabulary our
                            `hotline build --precision int8 --calib` uses), one utterance per
                            calibration batch, ids as [CLS] ... [SEP] (max 64 tokens)
Timing prints one JSON line shaped like bench/cpu_peers.py's (same inputs, same statistics; one
peer per process so peak RSS is that case's).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from cpu_peers import measure_and_print, onnx_path, ort_runner  # noqa: E402


def calib_sequences(calib, vocab, max_lines, max_len=64):
    from tokenizers import BertWordPieceTokenizer
    tok = BertWordPieceTokenizer(vocab, lowercase=True, strip_accents=None,
                                 handle_chinese_chars=True)
    tok.enable_truncation(max_len)
    seqs = []
    with open(calib, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            text = json.loads(line)["text"]
            ids = tok.encode(text).ids
            if len(ids) > 2:
                seqs.append(ids)
            if max_lines and len(seqs) >= max_lines:
                break
    if not seqs:
        sys.exit(f"cpu_int8_peers: no calibration text in {calib}")
    return seqs


def prepare(models, size, calib, vocab, lines):
    import numpy as np
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)
    src = onnx_path(models, size)
    dyn = os.path.join(models, f"{size}_int8_dynamic.onnx")
    sta = os.path.join(models, f"{size}_int8_static.onnx")
    t0 = time.time()
    quantize_dynamic(src, dyn, weight_type=QuantType.QInt8)
    t1 = time.time()
    seqs = calib_sequences(calib, vocab, lines)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(seqs)

        def get_next(self):
            ids = next(self.it, None)
            if ids is None:
                return None
            a = np.array([ids], dtype=np.int64)
            return {"input_ids": a, "attention_mask": np.ones_like(a),
                    "token_type_ids": np.zeros_like(a)}

    quantize_static(src, sta, Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    t2 = time.time()
    print(json.dumps({"prepared": [dyn, sta], "calib_utterances": len(seqs),
                      "dynamic_s": round(t1 - t0, 1), "static_s": round(t2 - t1, 1),
                      "bytes": {os.path.basename(p): os.path.getsize(p) for p in (src, dyn, sta)}}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", choices=["ort_fp32", "ort_int8_dynamic", "ort_int8_static"])
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--models", default=os.path.join(HERE, "models"))
    ap.add_argument("--prepare", action="store_true")
    ap.add_argument("--calib", default=os.path.join(ROOT, "data/hotline/calib.jsonl"))
    ap.add_argument("--vocab", default=os.path.join(ROOT, "models/default/vocab.txt"))
    ap.add_argument("--calib-lines", type=int, default=400)
    ap.add_argument("--spin", type=int, default=1, help="ORT intra-op spinning (1) or not (0)")
    a = ap.parse_args()
    if a.prepare:
        prepare(a.models, a.size, a.calib, a.vocab, a.calib_lines)
        return
    if a.peer is None:
        ap.error("--peer is required")
    path = {"ort_fp32": onnx_path(a.models, a.size),
            "ort_int8_dynamic": os.path.join(a.models, f"{a.size}_int8_dynamic.onnx"),
            "ort_int8_static": os.path.join(a.models, f"{a.size}_int8_static.onnx")}[a.peer]
    if not os.path.exists(path):
        sys.exit(f"cpu_int8_peers: {path} missing (run with --prepare first)")
    run = ort_runner(path, a.threads, spin=bool(a.spin))
    measure_and_print(run, a)


if __name__ == "__main__":
    main()
