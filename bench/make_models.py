#!/usr/bin/env python3
"""Make the joint intent + slot BERT models of PERFORMANCE.md and export them to ONNX.

    ~/.cache/hotline/venv/bin/python bench/make_models.py [--sizes small base] [--opsets 14 17]

The module is plain PyTorch (no `transformers`), the same as the CPU peer model, so
that the peers and Hotline time the same graph. Writes into bench/models/ (git-ignored):
  <size>_op<opset>.onnx   inputs input_ids/attention_mask/token_type_ids int64 [batch, seq];
                          outputs intent_logits [batch, 64], slot_logits [batch, seq, 41]
  <size>.pt               state_dict (fixed seed), for PyTorch peers
  <size>_check.json       one random padded batch + PyTorch FP32 outputs
tests/fixtures/engine/make_fixtures.py reuses BertJoint for the tiny test models.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 21128          # bert-base-chinese vocabulary size
MAX_POS = 512
TYPE_VOCAB = 2
N_INTENTS = 64
N_SLOTS = 41           # BIO tags
LN_EPS = 1e-12
CLS_ID, SEP_ID, PAD_ID = 101, 102, 0

CONFIGS = {
    "small": dict(layers=4, hidden=256, heads=4, ffn=1024),
    "base": dict(layers=12, hidden=768, heads=12, ffn=3072),
}


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x, ext_mask):
        b, s, h = x.shape

        def split(t):
            return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)   # b, nh, s, hd
        q = split(self.query(x))
        k = split(self.key(x))
        v = split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores + ext_mask                                         # b, 1, 1, s
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h)
        return self.out(ctx)


class EncoderLayer(nn.Module):
    """BERT post-LN layer: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.attn_ln = nn.LayerNorm(hidden, eps=LN_EPS)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.ffn_out = nn.Linear(ffn, hidden)
        self.ffn_ln = nn.LayerNorm(hidden, eps=LN_EPS)

    def forward(self, x, ext_mask):
        x = self.attn_ln(x + self.attn(x, ext_mask))
        x = self.ffn_ln(x + self.ffn_out(F.gelu(self.ffn_in(x))))     # exact (erf) GELU
        return x


class BertJoint(nn.Module):
    def __init__(self, layers, hidden, heads, ffn):
        super().__init__()
        self.word = nn.Embedding(VOCAB, hidden)
        self.pos = nn.Embedding(MAX_POS, hidden)
        self.token_type = nn.Embedding(TYPE_VOCAB, hidden)
        self.emb_ln = nn.LayerNorm(hidden, eps=LN_EPS)
        self.register_buffer("position_ids", torch.arange(MAX_POS).unsqueeze(0), persistent=False)
        self.layers = nn.ModuleList([EncoderLayer(hidden, heads, ffn) for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)            # BERT pooler (dense + tanh on [CLS])
        self.intent_head = nn.Linear(hidden, N_INTENTS)
        self.slot_head = nn.Linear(hidden, N_SLOTS)
        self.apply(self._init)

    @staticmethod
    def _init(m):   # BERT-style init
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.data.normal_(0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            m.bias.data.zero_()
        if isinstance(m, nn.LayerNorm):
            m.weight.data.fill_(1.0)
            m.bias.data.zero_()

    def forward(self, input_ids, attention_mask, token_type_ids):
        s = input_ids.size(1)
        pos_ids = self.position_ids[:, :s]
        x = self.word(input_ids) + self.pos(pos_ids) + self.token_type(token_type_ids)
        x = self.emb_ln(x)
        ext_mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, ext_mask)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        intent_logits = self.intent_head(pooled)
        slot_logits = self.slot_head(x)
        return intent_logits, slot_logits


def build(size, seed=1234):
    torch.manual_seed(seed)
    m = BertJoint(**CONFIGS[size])
    m.eval()
    return m


def random_batch(batch, seq, gen=None, pad_tail=False):
    """Token ids like a tokenised Chinese query: [CLS] x... [SEP], token_type all 0."""
    ids = torch.randint(672, 8000, (batch, seq), generator=gen, dtype=torch.int64)
    ids[:, 0] = CLS_ID
    ids[:, -1] = SEP_ID
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if pad_tail and batch > 1:   # make row 1.. shorter to exercise the attention mask
        for r in range(1, batch):
            L = max(2, seq - 3 * r)
            ids[r, L - 1] = SEP_ID
            ids[r, L:] = PAD_ID
            mask[r, L:] = 0
    tt = torch.zeros(batch, seq, dtype=torch.int64)
    return ids, mask, tt


DYNAMIC_AXES = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                "token_type_ids": {0: "batch", 1: "seq"}, "intent_logits": {0: "batch"},
                "slot_logits": {0: "batch", 1: "seq"}}


def export_onnx(model, args, path, opset):
    kw = {}
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5):
        kw["dynamo"] = False   # the TorchScript exporter, as deployed exporters still use
    with torch.no_grad():
        torch.onnx.export(model, args, path, opset_version=opset,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["intent_logits", "slot_logits"],
                          dynamic_axes=DYNAMIC_AXES, do_constant_folding=True, **kw)


def export(size, opsets, out_dir):
    import onnx
    t0 = time.time()
    model = build(size)
    n_params = sum(p.numel() for p in model.parameters())
    torch.save(model.state_dict(), os.path.join(out_dir, f"{size}.pt"))
    gen = torch.Generator().manual_seed(7)
    ids, mask, tt = random_batch(2, 24, gen, pad_tail=True)
    with torch.inference_mode():
        intent, slots = model(ids, mask, tt)
    for opset in opsets:
        path = os.path.join(out_dir, f"{size}_op{opset}.onnx")
        export_onnx(model, (ids, mask, tt), path, opset)
        m = onnx.load(path)
        onnx.checker.check_model(m)
        ops = {}
        for n in m.graph.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
        print(json.dumps({"size": size, **CONFIGS[size], "params": n_params, "opset": opset,
                          "onnx_bytes": os.path.getsize(path), "onnx_ops": ops,
                          "seconds": round(time.time() - t0, 1)}))
    check = {"size": size, "shape": list(ids.shape),
             "input_ids": ids.flatten().tolist(), "attention_mask": mask.flatten().tolist(),
             "token_type_ids": tt.flatten().tolist(),
             "intent_logits": intent.flatten().tolist(), "slot_logits": slots.flatten().tolist()}
    with open(os.path.join(out_dir, f"{size}_check.json"), "w") as f:
        json.dump(check, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["small", "base"])
    ap.add_argument("--opsets", nargs="+", type=int, default=[14, 17])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "models"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for s in a.sizes:
        export(s, a.opsets, a.out)


if __name__ == "__main__":
    main()
