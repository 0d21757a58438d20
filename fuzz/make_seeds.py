"""Writes the fuzzers' seed corpora (corpus/tokenizer, corpus/plan, corpus/slots): a few small
inputs each. The plans follow src/engine/plan.h (format version 2). Run from anywhere; overwrites
the seeds."""
import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent


def plan(nodes, weights, bf16=()):
    table, blob = [], b""
    for name, shape, values in weights:
        storage = "bf16" if name in bf16 else ""
        if storage:
            data = b"".join(struct.pack("<f", v)[2:] for v in values)
        else:
            data = struct.pack("<%df" % len(values), *values)
        entry = {"name": name, "dtype": 1, "shape": shape, "offset": len(blob), "bytes": len(data)}
        if storage:
            entry["storage"] = storage
        table.append(entry)
        blob += data + b"\0" * (-len(data) % 64)
    meta = {
        "format_version": 2, "fingerprint": {}, "precision": "fp32", "backend": "cpu",
        "profile": "1x1:2x4:2x4", "mode": "packed", "opset": 17,
        "inputs": [{"name": "input_ids", "dtype": 7, "dims": ["batch", "seq"]}],
        "outputs": [{"name": "x", "dtype": 1, "dims": ["batch", "seq", "2"],
                     "kind": "per_token", "inner_shape": [2]}],
        "dims": {"x": ["batch", "seq", "2"]}, "nodes": nodes, "extra": {},
        "weight_bytes": len(blob), "weights": table,
    }
    m = json.dumps(meta, separators=(",", ":")).encode()
    head = b"HOTLPLAN" + struct.pack("<IIQ", 2, 0, len(m)) + m
    return head + b"\0" * (-len(head) % 64) + blob


EMBED = {"name": "emb", "op": "EmbedLayerNorm", "precision": "fp32",
         "inputs": ["input_ids", "", "word", "pos", "", "gamma", "beta"], "outputs": ["x"],
         "attrs": {"epsilon": {"f": 1e-12}}}
WEIGHTS = [("word", [6, 2], [0.5 * k for k in range(12)]), ("pos", [4, 2], [0.1] * 8),
           ("gamma", [2], [1.0, 1.0]), ("beta", [2], [0.0, 0.0])]

seeds = {
    "plan/embed": plan([EMBED], WEIGHTS),
    "plan/embed_bf16": plan([EMBED], WEIGHTS, bf16={"word"}),
    "plan/header_only": b"HOTLPLAN" + struct.pack("<IIQ", 2, 0, 0),
    # First byte: tokenizer options (bit 0 lowercase, 1 width folding, 2 special literals,
    # 3 [CLS]/[SEP], high nibble max length); the rest is the text.
    "tokenizer/chinese": b"\x0f" + "我家楼下装修太吵了".encode(),
    "tokenizer/mixed": b"\xff" + "Calling 12345, ÉÈ café！ＡＢＣ [SEP] hotline".encode(),
    "tokenizer/phone": b"\x09" + "我的电话是138 1234 5678，身份证11010519491231002X".encode(),
    "tokenizer/bad_utf8": b"\x01abc\xff\xc0\x80\xed\xa0\x80",
    # First 4 bytes: seconds added to the reference time (little endian); the rest is the text.
    "slots/phone": b"\0\0\0\0" + "幺三八 1234-5678 转 123".encode(),
    "slots/id": b"\x10\0\0\0" + "11010519491231002叉".encode(),
    "slots/time": b"\0\x10\0\0" + "上周三晚上八点半".encode(),
    "slots/amount": b"\0\0\0\0" + "一万二千三百块五毛".encode(),
    "slots/plate": b"\0\0\0\0" + "粤b·d12345".encode(),
    "slots/correction": b"\0\0\0\0" + "不是电子二路，是电子三路18号，最后一位是五".encode(),
    "slots/address": b"\0\0\0\0" + "海南省海口市龙华区荷光路南一巷12号".encode(),
    "slots/rfc3339": b"\0\0\0\0" + b"2026-12-01T10:00:00.25+08:00",
    "slots/id_then_phone": b"\0\0\0\0" + "11010519491231002叉 13812345678".encode(),
    "slots/bad_utf8": b"\xff\xff\xff\xff" + b"\xe4\xb8\x80\xff\xc0\x80gd-2026 x",
}
for rel, data in seeds.items():
    p = HERE / "corpus" / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
