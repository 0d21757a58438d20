"""Bring your own model: the BERT family from the installed transformers, through each torch
exporter this torch has, must build into a fused CPU plan that matches ONNX Runtime.

Each model is made here from a tiny config (random weights, nothing downloaded): BERT (Chinese
RoBERTa-wwm and MacBERT checkpoints are BERTs), ERNIE, RoBERTa, ALBERT (shared layers, factorised
embeddings, tanh GELU), DistilBERT (masked_fill attention, no token types), ELECTRA
(discriminator, projected embeddings); heads: last_hidden_state (with and without a pooler),
sequence classification, token classification. For each:
  - `hotline build --require-fused` at FP32 (exit 3 when a pattern does not apply), and BF16,
  - the fused op count from `hotline inspect --json`: one EmbedLayerNorm, one Attention per layer,
    no MatMul/Softmax left,
  - `hotline infer` against ONNX Runtime on a padded batch: relative error <= 1e-4 on kept tokens
    (BF16: normalised L2 error <= 1%),
  - INT8 (calibrated on random text) within the quantisation error: normalised L2 error <= 5%.
"""
import json
import os
import subprocess
import warnings

import numpy as np
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")  # the venv's torch: the zoo cannot run without it
transformers = pytest.importorskip("transformers")
warnings.filterwarnings("ignore")

HOTLINE = os.environ.get("HOTLINE_BIN", "hotline")
VOCAB, HIDDEN, LAYERS, HEADS, FFN, MAX_POS, LABELS = 500, 32, 2, 4, 64, 64, 5


def config(arch):
    t = transformers
    common = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, intermediate_size=FFN, num_labels=LABELS)
    if arch in ("bert", "ernie"):  # Chinese RoBERTa-wwm and MacBERT checkpoints are BERTs too
        kind = t.BertConfig if arch == "bert" else t.ErnieConfig
        return kind(max_position_embeddings=MAX_POS, **common)
    if arch == "roberta":  # positions start after the padding index; one token type
        return t.RobertaConfig(max_position_embeddings=MAX_POS + 2, type_vocab_size=1,
                               pad_token_id=1, **common)
    if arch == "albert":
        return t.AlbertConfig(max_position_embeddings=MAX_POS, embedding_size=16,
                              **common)  # ALBERT's own activation: gelu_new (tanh GELU)
    if arch == "electra":
        return t.ElectraConfig(max_position_embeddings=MAX_POS, embedding_size=16, **common)
    if arch == "distilbert":
        return t.DistilBertConfig(vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS,
                                  hidden_dim=FFN, max_position_embeddings=MAX_POS,
                                  num_labels=LABELS)
    raise ValueError(arch)


def model(arch, head, pooler):
    t = transformers
    names = {"bert": "Bert", "ernie": "Ernie", "roberta": "Roberta", "albert": "Albert",
             "electra": "Electra",
             "distilbert": "DistilBert"}
    cls = {"base": "Model", "seq": "ForSequenceClassification",
           "tok": "ForTokenClassification"}[head]
    kind = getattr(t, names[arch] + cls)
    torch.manual_seed(0)
    if head == "base" and arch in ("bert", "ernie", "roberta", "albert"):
        m = kind(config(arch), add_pooling_layer=pooler) if arch != "albert" else kind(config(arch))
    else:
        m = kind(config(arch))
    return m.eval()


class Wrapped(torch.nn.Module):
    """Fixed input names and a tuple of plain tensors out."""

    def __init__(self, m, types, outputs, positions=False):
        super().__init__()
        self.m, self.types, self.outputs, self.positions = m, types, outputs, positions

    def forward(self, input_ids, attention_mask, token_type_ids=None, position_ids=None):
        kw = dict(input_ids=input_ids, attention_mask=attention_mask)
        if self.types:
            kw["token_type_ids"] = token_type_ids
        if self.positions:
            kw["position_ids"] = position_ids
        out = self.m(**kw, return_dict=True)
        return tuple(out[k] for k in self.outputs)


def export(arch, head, pooler, types, exporter, opset, path, external=False, positions=False):
    m = model(arch, head, pooler)
    if head == "base":
        outputs = ["last_hidden_state"] + (["pooler_output"] if pooler else [])
    else:
        outputs = ["logits"]
    inputs = (["input_ids", "attention_mask"] + (["token_type_ids"] if types else []) +
              (["position_ids"] if positions else []))
    w = Wrapped(m, types, outputs, positions).eval()
    ids = torch.randint(5, VOCAB, (2, 8))
    args = (ids, torch.ones(2, 8, dtype=torch.int64), torch.zeros(2, 8, dtype=torch.int64),
            torch.arange(8).expand(2, 8))
    args = args[:2] + ((args[2],) if types else (None,) if positions else ()) + \
        ((args[3],) if positions else ())
    axes = {k: {0: "batch", 1: "seq"} for k in inputs}
    for o in outputs:
        per_token = o == "last_hidden_state" or head == "tok"
        axes[o] = {0: "batch", 1: "seq"} if per_token else {0: "batch"}
    if exporter == "torchscript":
        torch.onnx.export(w, args, path, input_names=inputs, output_names=outputs,
                          dynamic_axes=axes, opset_version=opset)
    else:
        torch.onnx.export(w, args, path, input_names=inputs, output_names=outputs,
                          dynamic_axes=axes, opset_version=opset, dynamo=True)
    if external:
        import onnx
        proto = onnx.load(path)
        onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(path) + ".data", size_threshold=0)
    return inputs, outputs


def has_dynamo():
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 5)


# (arch, head, pooler, token_type_ids given, opset, external data[, position_ids given[, opset the
# export is converted to with onnx's version converter (torch 1.13 exports up to opset 17)]])
CASES = [
    ("bert", "base", True, True, 14, False),
    ("bert", "base", False, False, 17, True),
    ("bert", "seq", True, True, 17, False),
    ("bert", "tok", True, True, 13, False),
    ("bert", "seq", True, True, 14, False, True),
    ("ernie", "seq", True, True, 14, False),
    ("ernie", "base", False, False, 17, False),
    ("roberta", "seq", True, False, 14, False),
    ("roberta", "base", False, False, 17, False),
    ("albert", "tok", True, True, 14, False),
    ("albert", "base", True, True, 17, False),
    ("distilbert", "seq", False, False, 14, False),
    ("distilbert", "tok", False, False, 17, False),
    ("electra", "seq", False, True, 14, False),
    ("electra", "tok", False, False, 17, False),
    ("bert", "seq", True, True, 17, False, False, 21),
    ("roberta", "base", False, False, 17, False, False, 20),
    ("distilbert", "tok", False, False, 17, False, False, 18),
]
EXPORTERS = ["torchscript", "dynamo"]


def case_id(c):
    arch, head, pooler, types, opset, ext = c[:6]
    return (f"{arch}-{head}" + ("" if head != "base" else "-pooler" if pooler else "-nopooler") +
            ("" if types else "-notypes") + f"-op{opset}" + ("-extdata" if ext else "") +
            ("-positions" if c[6:] and c[6] else "") + (f"-to{c[7]}" if c[7:] else ""))


def hotline(*args, check=True):
    p = subprocess.run([HOTLINE, *args], capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, f"hotline {' '.join(args)}: exit {p.returncode}\n{p.stderr}"
    return p


def feeds(inputs):
    rng = np.random.default_rng(7)
    lens = [9, 6, 3]
    ids = rng.integers(5, VOCAB, size=(3, 9)).astype(np.int64)
    mask = np.zeros((3, 9), dtype=np.int64)
    types = np.zeros((3, 9), dtype=np.int64)
    for r, n in enumerate(lens):
        mask[r, :n] = 1
        types[r, n // 2:n] = 1
        ids[r, 0], ids[r, n - 1], ids[r, n:] = 2, 3, 0  # [CLS] … [SEP], as tokenised text is
    f = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types,
         "position_ids": np.tile(np.arange(9, dtype=np.int64), (3, 1))}
    return {k: f[k] for k in inputs}


def compare(plan, onnx_path, inputs, tmp_path, l2=False):
    f = feeds(inputs)
    inp, outp = tmp_path / "in.json", tmp_path / "out.json"
    inp.write_text(json.dumps({k: v.tolist() for k, v in f.items()}))
    hotline("infer", "--plan", plan, "--input", str(inp), "--output", str(outp))
    got = json.loads(outp.read_text())
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    want = dict(zip(names, sess.run(names, f)))
    kept = f["attention_mask"].astype(bool)
    errs = {}
    for name, w in want.items():
        g = np.array(got[name], dtype=np.float64)
        assert g.shape == w.shape, (name, g.shape, w.shape)
        if w.ndim >= 2 and w.shape[:2] == kept.shape:  # per token: padded rows are unspecified
            g, w = g[kept], w[kept]
        if l2:  # normalised L2: the measure for quantised plans (one outlier does not decide)
            errs[name] = float(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-12))
        else:  # largest deviation against the largest value
            errs[name] = float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-6))
    return errs


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_zoo_builds_fused_and_matches_onnxruntime(case, exporter, tmp_path):
    if exporter == "dynamo" and not has_dynamo():
        pytest.skip(f"torch {torch.__version__} has no dynamo ONNX exporter (needs 2.5+)")
    arch, head, pooler, types, opset, ext = case[:6]
    onnx_path = str(tmp_path / "model.onnx")
    inputs, outputs = export(arch, head, pooler, types, exporter, opset, onnx_path, ext,
                             positions=bool(case[6:] and case[6]))
    if case[7:]:
        import onnx
        from onnx import version_converter
        onnx.save(version_converter.convert_version(onnx.load(onnx_path), case[7]), onnx_path)
    plan = str(tmp_path / "fp32.plan")
    p = hotline("build", "--onnx", onnx_path, "--precision", "fp32", "--profile",
                "1x1:2x16:4x32", "--no-tune", "--require-fused", "-o", plan, check=False)
    if p.returncode != 0:
        explain = hotline("inspect", "--explain", onnx_path, check=False)
        pytest.fail(f"not fused (exit {p.returncode}):\n{p.stderr}\n"
                    f"{explain.stdout}{explain.stderr}")
    info = json.loads(hotline("inspect", "--json", plan).stdout)
    assert info["mode"] == "packed"
    ops = {}
    for o in info["ops"]:
        ops[o["type"]] = ops.get(o["type"], 0) + 1
    assert ops.get("EmbedLayerNorm") == 1, ops
    assert ops.get("Attention") == LAYERS, ops
    # Per layer: Q, K, V as one Dense, the FFN's first Dense, and two DenseLayerNorm (output
    # projections with residual and LayerNorm). Besides: the embedding projection (ALBERT,
    # ELECTRA), the pooler, and the head's GEMMs.
    assert ops.get("DenseLayerNorm") == 2 * LAYERS, ops
    pooled = (arch in ("bert", "ernie") and head == "seq") or (head == "base" and pooler and
                                                              arch in ("bert", "ernie", "albert"))
    head_gemms = {"base": 0, "tok": 1, "seq": 1 if arch in ("bert", "ernie") else 2}[head]
    extra = int(arch in ("albert", "electra")) + int(pooled) + head_gemms
    assert ops.get("Dense") == 2 * LAYERS + extra, ops
    assert not {"MatMul", "Softmax", "Gemm", "Reshape", "Transpose"} & set(ops), ops
    errs = compare(plan, onnx_path, inputs, tmp_path)
    assert sorted(errs) == sorted(outputs)
    assert max(errs.values()) <= 1e-4, errs
    if "position_ids" in inputs:  # the packed engine numbers positions: others are refused
        bad = {k: v.tolist() for k, v in feeds(inputs).items()}
        bad["position_ids"] = [[p + 1 for p in row] for row in bad["position_ids"]]
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        p = hotline("infer", "--plan", plan, "--input", str(tmp_path / "bad.json"), check=False)
        assert p.returncode != 0 and "position_ids row 0 is not 0, 1, 2" in p.stderr, p.stderr
    # BF16 (weights and GEMM inputs in bfloat16; on CPUs without BF16 arithmetic the weights are
    # widened in registers): bfloat16's 8-bit mantissa gives errors near 2^-8 per product.
    plan16 = str(tmp_path / "bf16.plan")
    hotline("build", "--onnx", onnx_path, "--precision", "bf16", "--profile", "1x1:2x16:4x32",
            "--no-tune", "--require-fused", "-o", plan16)
    errs16 = compare(plan16, onnx_path, inputs, tmp_path, l2=True)
    print(f"bf16 {case_id(case)} {exporter}: normalised L2 error {errs16}")
    assert max(errs16.values()) <= 1e-2, errs16
    # INT8, calibrated on text over a made-up vocabulary: token k is "w<k>".
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n" +
                     "".join(f"w{k}\n" for k in range(5, VOCAB)))
    calib = tmp_path / "calib.jsonl"
    rng = np.random.default_rng(3)
    lines = [" ".join(f"w{k}" for k in rng.integers(5, VOCAB, 12)) for _ in range(16)]
    calib.write_text("".join(json.dumps({"text": line}) + "\n" for line in lines))
    plan8 = str(tmp_path / "int8.plan")
    hotline("build", "--onnx", onnx_path, "--precision", "int8", "--calib", str(calib),
            "--vocab", str(vocab),
            "--profile", "1x1:2x16:4x32", "--no-tune", "-o", plan8)
    ops8 = json.loads(hotline("inspect", "--json", plan8).stdout)["ops"]
    precisions = [o["precision"] for o in ops8 if o["type"] in ("Dense", "DenseLayerNorm")]
    assert precisions.count("int8") >= 4 * LAYERS, precisions  # every encoder GEMM at least
    errs8 = compare(plan8, onnx_path, inputs, tmp_path, l2=True)
    print(f"int8 {case_id(case)} {exporter}: normalised L2 error {errs8}")
    # 8-bit activations and weights over two layers: measured 0.3-1.3%; a wrong scale, zero
    # point or layout is off by far more.
    assert max(errs8.values()) <= 0.05, errs8


class WeakMaskEncoder(torch.nn.Module):
    """One attention layer whose padding mask adds only -10: not a mask the packed attention can
    stand in for, so the attention pattern must be refused at its Softmax, and said so."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.word = torch.nn.Embedding(VOCAB, HIDDEN)
        self.pos = torch.nn.Embedding(MAX_POS, HIDDEN)
        self.ln = torch.nn.LayerNorm(HIDDEN)
        self.q, self.k, self.v = (torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(3))

    def forward(self, input_ids, attention_mask):
        b, s = input_ids.shape
        x = self.ln(self.word(input_ids) + self.pos(torch.arange(s).unsqueeze(0)))
        split = lambda t: t.view(b, s, HEADS, HIDDEN // HEADS).transpose(1, 2)
        scores = split(self.q(x)) @ split(self.k(x)).transpose(-1, -2) / 8.0
        scores = scores + (1.0 - attention_mask[:, None, None, :].float()) * -10.0
        ctx = torch.softmax(scores, dim=-1) @ split(self.v(x))
        return ctx.transpose(1, 2).reshape(b, s, HIDDEN)


class SdpaStyleEncoder(WeakMaskEncoder):
    """Attention written as torch's ONNX export of scaled_dot_product_attention with a bool mask
    (torch >= 2.1, TorchScript exporter): Q and K^T each scaled by sqrt(1/sqrt(d)), the mask as
    Where(mask, 0, -inf), and Where(IsNaN(p), 0, p) after the softmax. The engine must fuse it."""

    def forward(self, input_ids, attention_mask):
        b, s = input_ids.shape
        d = HIDDEN // HEADS
        x = self.ln(self.word(input_ids) + self.pos(torch.arange(s).unsqueeze(0)))
        split = lambda t: t.view(b, s, HEADS, d).transpose(1, 2)
        scale = torch.sqrt(torch.tensor(1.0) / torch.sqrt(torch.tensor(float(d))))
        keep = attention_mask.bool()[:, None, None, :]
        bias = torch.where(keep, torch.tensor(0.0), torch.tensor(float("-inf")))
        scores = (split(self.q(x)) * scale) @ (split(self.k(x)).transpose(-2, -1) * scale) + bias
        p = torch.softmax(scores, dim=-1)
        p = torch.where(torch.isnan(p), torch.tensor(0.0), p)
        return (p @ split(self.v(x))).transpose(1, 2).reshape(b, s, HIDDEN)


def export_small(module, path, opset=14):
    args = (torch.randint(5, VOCAB, (2, 8)), torch.ones(2, 8, dtype=torch.int64))
    torch.onnx.export(module.eval(), args, path, input_names=["input_ids", "attention_mask"],
                      output_names=["hidden"], opset_version=opset,
                      dynamic_axes={k: {0: "batch", 1: "seq"} for k in
                                    ["input_ids", "attention_mask", "hidden"]})


def test_sdpa_style_attention_fuses(tmp_path):
    onnx_path = str(tmp_path / "sdpa.onnx")
    export_small(SdpaStyleEncoder(), onnx_path)
    import onnx
    ops = {n.op_type for n in onnx.load(onnx_path).graph.node}
    assert {"IsNaN", "Where"} <= ops, ops  # the pattern under test is really in the file
    plan = str(tmp_path / "sdpa.plan")
    hotline("build", "--onnx", onnx_path, "--no-tune", "--require-fused", "--profile",
            "1x1:2x16:4x32", "-o", plan)
    kinds = [o["type"] for o in json.loads(hotline("inspect", "--json", plan).stdout)["ops"]]
    assert kinds.count("Attention") == 1 and "Softmax" not in kinds, kinds
    errs = compare(plan, onnx_path, ["input_ids", "attention_mask"], tmp_path)
    assert max(errs.values()) <= 1e-4, errs


def test_unfused_model_warns_and_explains(tmp_path):
    onnx_path = str(tmp_path / "weak.onnx")
    export_small(WeakMaskEncoder(), onnx_path)
    plan = str(tmp_path / "weak.plan")
    p = hotline("build", "--onnx", onnx_path, "--no-tune", "-o", plan)  # builds, padded, warns
    assert "WARNING: the encoder was left UNFUSED" in p.stderr, p.stderr
    assert "attention at Softmax node" in p.stderr and "not 0 for kept and ≤ -1000" in p.stderr
    assert json.loads(hotline("inspect", "--json", plan).stdout)["mode"] == "padded"
    strict = hotline("build", "--onnx", onnx_path, "--no-tune", "--require-fused", "-o", plan,
                     check=False)
    assert strict.returncode == 3, strict.stderr
    explain = hotline("inspect", "--explain", onnx_path).stdout
    assert "UNFUSED" in explain and "not applied: attention at Softmax node" in explain, explain
    # The padded plan still computes the model: against ONNX Runtime.
    errs = compare(plan, onnx_path, ["input_ids", "attention_mask"], tmp_path)
    assert max(errs.values()) <= 1e-4, errs
