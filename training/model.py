"""The joint intent + slot BERT model, in plain PyTorch (runs on torch 1.13 and 2.x).

Same structure as shared/peers/cpu/bert_joint.py, whose ONNX export the engine's fusions match:
post-LN layers, exact (erf) GELU, LayerNorm eps 1e-12, separate q/k/v Linear, additive mask
(1 - mask) * -10000, BERT pooler (dense + tanh) on [CLS] feeding the intent head, slot head on every
token. Dropout modules vanish from the export (eval mode). The MLM head exists for pretraining
only and is not part of the exported graph.
"""
import glob
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-12
MAX_POS = 512
TYPE_VOCAB = 2


class SelfAttention(nn.Module):
    # Training on a GPU may use PyTorch's fused attention (the same arithmetic); the export keeps
    # the explicit matmul / softmax form that the engine's fusions match.
    use_sdpa = False

    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, ext_mask):
        b, s, h = x.shape

        def split(t):
            return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

        q = split(self.query(x))
        k = split(self.key(x))
        v = split(self.value(x))
        if SelfAttention.use_sdpa and not torch.onnx.is_in_onnx_export():
            ctx = F.scaled_dot_product_attention(
                q, k, v, attn_mask=ext_mask.to(q.dtype),
                dropout_p=self.drop.p if self.training else 0.0)
            return self.out(ctx.transpose(1, 2).reshape(b, s, h))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores + ext_mask
        probs = self.drop(torch.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h)
        return self.out(ctx)


class EncoderLayer(nn.Module):
    """BERT post-LN layer: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, hidden, heads, ffn, dropout):
        super().__init__()
        self.attn = SelfAttention(hidden, heads, dropout)
        self.attn_ln = nn.LayerNorm(hidden, eps=LN_EPS)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.ffn_out = nn.Linear(ffn, hidden)
        self.ffn_ln = nn.LayerNorm(hidden, eps=LN_EPS)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, ext_mask):
        x = self.attn_ln(x + self.drop(self.attn(x, ext_mask)))
        x = self.ffn_ln(x + self.drop(self.ffn_out(F.gelu(self.ffn_in(x)))))
        return x


class BertJoint(nn.Module):
    def __init__(self, vocab_size, n_intents, n_tags, layers=4, hidden=256, heads=4, ffn=1024,
                 dropout=0.1):
        super().__init__()
        self.config = dict(vocab_size=vocab_size, n_intents=n_intents, n_tags=n_tags,
                           layers=layers, hidden=hidden, heads=heads, ffn=ffn)
        self.word = nn.Embedding(vocab_size, hidden)
        self.pos = nn.Embedding(MAX_POS, hidden)
        self.token_type = nn.Embedding(TYPE_VOCAB, hidden)
        self.emb_ln = nn.LayerNorm(hidden, eps=LN_EPS)
        self.emb_drop = nn.Dropout(dropout)
        self.register_buffer("position_ids", torch.arange(MAX_POS).unsqueeze(0), persistent=False)
        self.layers = nn.ModuleList([EncoderLayer(hidden, heads, ffn, dropout)
                                     for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)
        self.head_drop = nn.Dropout(dropout)
        self.intent_head = nn.Linear(hidden, n_intents)
        self.slot_head = nn.Linear(hidden, n_tags)
        # MLM head (pretraining only): transform + decoder tied to the word embeddings.
        self.mlm_dense = nn.Linear(hidden, hidden)
        self.mlm_ln = nn.LayerNorm(hidden, eps=LN_EPS)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab_size))
        self.apply(self._init)

    @staticmethod
    def _init(m):  # BERT-style init
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.data.normal_(0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            m.bias.data.zero_()
        if isinstance(m, nn.LayerNorm):
            m.weight.data.fill_(1.0)
            m.bias.data.zero_()

    def encode(self, input_ids, attention_mask, token_type_ids):
        s = input_ids.size(1)
        pos_ids = self.position_ids[:, :s]
        x = self.word(input_ids) + self.pos(pos_ids) + self.token_type(token_type_ids)
        x = self.emb_drop(self.emb_ln(x))
        ext_mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, ext_mask)
        return x

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.encode(input_ids, attention_mask, token_type_ids)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        intent_logits = self.intent_head(self.head_drop(pooled))
        slot_logits = self.slot_head(self.head_drop(x))
        return intent_logits, slot_logits

    def mlm_logits(self, hidden_states):
        h = self.mlm_ln(F.gelu(self.mlm_dense(hidden_states)))
        return F.linear(h, self.word.weight, self.mlm_bias)


def export_state_dict(model):
    """The weights the exported graph uses (no MLM head)."""
    return {k: v for k, v in model.state_dict().items() if not k.startswith("mlm_")}


SHARD_BYTES = 12 * 2**20  # weights-*.npz shards stay under this (the device tool's file limit)


def read_weight_arrays(run_dir, dtype=np.float32):
    """A run folder's weights-*.npz as one dict of arrays cast to `dtype` (float only)."""
    out = {}
    shards = sorted(glob.glob(os.path.join(run_dir, "weights-*.npz")))
    if not shards:
        raise FileNotFoundError(f"expected weights-*.npz in {run_dir}")
    for p in shards:
        with np.load(p, allow_pickle=False) as z:
            for k in z.files:
                if not np.issubdtype(z[k].dtype, np.floating):
                    raise ValueError(f"{p}: tensor {k} is {z[k].dtype}, not a float")
                out[k] = z[k].astype(dtype)
    return out


def write_weight_shards(out_dir, sd):
    """Writes {name: array} as weights-0.npz, weights-1.npz, ... (sorted names, shards under
    SHARD_BYTES), removing the folder's earlier shards first."""
    os.makedirs(out_dir, exist_ok=True)
    shard, shards, size = {}, [], 0
    for k in sorted(sd):
        if shard and size + sd[k].nbytes > SHARD_BYTES:
            shards.append(shard)
            shard, size = {}, 0
        shard[k] = sd[k]
        size += sd[k].nbytes
    shards.append(shard)
    for old in glob.glob(os.path.join(out_dir, "weights-*.npz")):
        os.remove(old)
    for i, s in enumerate(shards):
        np.savez(os.path.join(out_dir, f"weights-{i}.npz"), **s)


def load_state(model, sd, where):
    """Loads {name: array} into `model`; every tensor but the MLM head's must be there, and no
    other. `where` names the source in the error."""
    missing, unexpected = model.load_state_dict(
        {k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if not k.startswith("mlm_")]
    if missing or unexpected:
        raise ValueError(f"weights in {where} do not match the model: missing {missing}, "
                         f"unexpected {unexpected}")
    return model


def load_weights(model, run_dir):
    """Loads a run folder's weights-*.npz into `model` (the MLM head may be absent)."""
    return load_state(model, read_weight_arrays(run_dir), run_dir)
