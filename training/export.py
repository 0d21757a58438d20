"""Export a training run to a model folder the C++ pipeline serves.

  python3 training/export.py --run build-train/run1 --vocab models/default/vocab.txt \\
      --data data/hotline --out models/default

Writes OUT/{model.onnx, vocab.txt, labels.json, model.yaml, taxonomy.yaml, README.md}.
model.onnx: opset 14, inputs input_ids / attention_mask / token_type_ids (int64 [batch, seq]),
outputs intent_logits [batch, n_intents] and slot_logits [batch, seq, n_tags], dynamic batch and
seq axes. Parity: ONNX Runtime against PyTorch on the whole test set (max abs / rel difference,
same argmax); the export fails if they disagree. The model card's figures are computed here from
the ONNX Runtime outputs on dev and test, and on the hand-written challenge set when DATA has one.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPO, TAXONOMY, Encoder, Taxonomy, decode_spans, metrics, read_jsonl  # noqa
from model import BertJoint, load_weights  # noqa: E402
from onnx_fp16 import round_state_dict_fp16, store_fp16, weight_map  # noqa: E402

MAX_ONNX_BYTES = 25 * 10**6
ATOL = 1e-3  # fp32 ONNX Runtime vs PyTorch logits; observed differences are ~1e-5


def load_run(run_dir):
    with open(os.path.join(run_dir, "config.json")) as f:
        cfg = json.load(f)
    model = BertJoint(cfg["vocab_size"], cfg["n_intents"], cfg["n_tags"], cfg["layers"],
                      cfg["hidden"], cfg["heads"], cfg["ffn"], dropout=0.0)
    load_weights(model, run_dir)
    model.eval()
    return model, cfg


def export_onnx(model, path, opset=14):
    ids = torch.tensor([[2, 10, 11, 12, 3], [2, 13, 3, 0, 0]], dtype=torch.long)
    mask = (ids != 0).long()
    tt = torch.zeros_like(ids)
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
           "token_type_ids": {0: "batch", 1: "seq"}, "intent_logits": {0: "batch"},
           "slot_logits": {0: "batch", 1: "seq"}}
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask, tt), path, opset_version=opset,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["intent_logits", "slot_logits"],
                          dynamic_axes=dyn, do_constant_folding=True)
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m)
    return os.path.getsize(path)


def batches(examples, pad, size=32):
    for b in range(0, len(examples), size):
        chunk = examples[b:b + size]
        n = max(len(e["ids"]) for e in chunk)
        ids = np.full((len(chunk), n), pad, dtype=np.int64)
        mask = np.zeros((len(chunk), n), dtype=np.int64)
        for i, e in enumerate(chunk):
            ids[i, :len(e["ids"])] = e["ids"]
            mask[i, :len(e["ids"])] = 1
        yield chunk, ids, mask, np.zeros_like(ids)


def run_parity(model, onnx_path, examples, pad, tax):
    """ORT vs PyTorch on `examples`; returns (report, intent preds, span preds) from ORT."""
    import onnxruntime as ort
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    max_abs, max_rel, mismatches, ties = 0.0, 0.0, 0, 0
    intents, spans = [], []
    for chunk, ids, mask, tt in batches(examples, pad):
        oi, os_ = sess.run(["intent_logits", "slot_logits"],
                           {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt})
        with torch.no_grad():
            ti, ts = model(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(tt))
        ti, ts = ti.numpy(), ts.numpy()
        m = mask.astype(bool)
        for o, t in ((oi, ti), (os_[m], ts[m])):  # slot logits: real tokens only
            d = np.abs(o - t)
            max_abs = max(max_abs, float(d.max()))
            max_rel = max(max_rel, float((d / (np.abs(t) + 1e-3)).max()))
            same = o.argmax(-1) == t.argmax(-1)
            if not same.all():
                # Only a near-tie may flip: the top two PyTorch logits within the tolerance.
                top2 = np.sort(t[~same], axis=-1)[:, -2:]
                if (top2[:, 1] - top2[:, 0] > 2 * ATOL).any():
                    mismatches += int((~same).sum())
                else:
                    ties += int((~same).sum())
        intents += oi.argmax(-1).tolist()
        tags = os_.argmax(-1)
        for i, e in enumerate(chunk):
            spans.append(decode_spans(tags[i, :len(e["ids"])].tolist(), e["offsets"], tax.tags,
                                      e.get("text")))
    rep = {"n": len(examples), "max_abs_diff": max_abs, "max_rel_diff": max_rel,
           "argmax_mismatches": mismatches, "near_tie_flips": ties}
    return rep, intents, spans


def write_card(out, cfg, size, dev, test, parity, n_params, challenge=None):
    a = cfg["args"]
    lines = [
        "# default: the shipped Hotline NLU model",
        "",
        f"Joint intent + slot model for the 12345 hotline taxonomy (`taxonomy.yaml`, "
        f"{cfg['n_intents']} intents, {(cfg['n_tags'] - 1) // 2} slot types as {cfg['n_tags']} BIO tags).",
        ("A BERT-style encoder pretrained by whole-word-masked LM on real Chinese text (customer "
         "service questions and reviews, assistant and dialog utterances, real 12345 work orders; "
         f"{cfg['pretrain']['step']:,} steps, {cfg['pretrain']['seen_tokens'] / 1e6:.0f}M tokens; "
         "`training/pretrain.py`), then fine-tuned here. "
         if cfg.get("pretrain") else "A BERT-style encoder trained from scratch. ") +
        "Character vocabulary (`vocab.txt`): GB 2312's hanzi, every character the corpus uses "
        "twice or more, symbols, digits, Latin letters and their `##` word pieces.",
        "",
        "## Model",
        "",
        f"- {cfg['layers']} post-LN layers, hidden {cfg['hidden']}, {cfg['heads']} heads, FFN "
        f"{cfg['ffn']}, exact GELU, LayerNorm eps 1e-12; pooler (dense + tanh) on [CLS] feeds the "
        "intent head, the slot head reads every token.",
        f"- {n_params:,} parameters; `model.onnx` {size / 1e6:.1f} MB (opset 14; inputs "
        "`input_ids`, `attention_mask`, `token_type_ids` int64 [batch, seq]; outputs "
        f"`intent_logits` [batch, {cfg['n_intents']}], `slot_logits` [batch, seq, {cfg['n_tags']}]); "
        "weights stored as FP16 initializers with Cast nodes.",
        f"- Vocabulary: {cfg['vocab_size']} tokens. Tokenisation: full-width ASCII folded to ASCII, "
        "then `BertTokenizer(vocab.txt, do_lower_case=True)`, [CLS] text [SEP], at most "
        f"{cfg['max_length']} tokens.",
        "- Slot decoding: a span starts at B-x (or at an I-x that does not continue an x span) and "
        "grows over the following I-x tokens; offsets are code points of the original text, "
        "trimmed of punctuation and spaces; spans under 2 code points are dropped (no slot "
        "value is one character long; src/nlu/bio.cc decodes the same way).",
        "",
        "## Data and training",
        "",
        f"- `data/hotline/` (see its generator under `training/data_gen/`): {a.get('max_lines') or 'all'}"
        f" lines of train.jsonl ({cfg.get('n_train', '?')} lines), dev for model selection, "
        "test for the figures below; calib.jsonl (unlabelled) only in MLM pretraining.",
        f"- MLM pretraining steps: {a['mlm_steps']}; fine-tuning {a['epochs']} epochs, batch "
        f"{a['batch_size']}, AdamW lr {a['lr']} (warmup {a['warmup']}, linear decay), weight decay "
        f"{a['weight_decay']}, dropout {a['dropout']}, seed {a['seed']}; augmentation: slot value "
        f"swap {a['aug_swap']}, character dropout {a['aug_drop']}, filler insertion "
        f"{a['aug_filler']}, ASR-style noise (homophones, punctuation dropped, stutters) "
        f"{a.get('aug_asr', 0)}, garbled noise trained toward a uniform intent {a.get('garble', 0)}; "
        f"real out-of-scope requests (SMP-ECDT, CAIS) added to train. Best dev epoch: "
        f"{cfg['best_epoch']}. Trained on {cfg['device']} with torch {cfg['torch']}.",
        (f"- Confidence: temperature {cfg['calibration']['temperature']:.3f} fitted on dev; "
         f"the dialog hands off below a calibrated confidence of "
         f"{cfg['calibration']['handoff_threshold']} (`model.yaml` calibration). ECE in "
         "`export_report.json`." if cfg.get("calibration") else "- Confidence: uncalibrated."),
    ] + ([f"- {note}" for note in cfg.get("notes", [])]) + [
        "- Command:",
        "",
        "```",
        "python3 training/make_vocab.py --out models/default/vocab.txt --data data/hotline/*.jsonl",
        cfg.get("command", "(not recorded)"),
        "python3 training/export.py --run RUN --vocab models/default/vocab.txt --data data/hotline "
        "--out models/default",
        "```",
        "",
        "## Figures (Python side: ONNX Runtime on this folder's model.onnx)",
        "",
        "| split | lines | intent accuracy | slot precision | slot recall | slot F1 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    rows = [("dev", dev), ("test", test)]
    if challenge:
        rows.append(("challenge (hand-written, other voices)", challenge))
    for name, m in rows:
        lines.append(f"| {name} | {m['n']} | {m['intent_accuracy']:.4f} | "
                     f"{m['slot_precision']:.4f} | {m['slot_recall']:.4f} | {m['slot_f1']:.4f} |")
    lines += ["", f"Export parity on test ({parity['n']} lines): max |ORT - PyTorch| "
              f"{parity['max_abs_diff']:.2e}, max relative {parity['max_rel_diff']:.2e}, argmax "
              f"mismatches {parity['argmax_mismatches']} (near-tie flips {parity['near_tie_flips']}).",
              "", "## Per intent (test" + (", and recall on the challenge set" if challenge else "")
              + ")", "",
              "| intent | n | precision | recall | F1 |" + (" challenge n | challenge recall |"
                                                          if challenge else ""),
              "| --- | --- | --- | --- | --- |" + (" --- | --- |" if challenge else "")]
    for name, r in test["per_intent"].items():
        row = f"| {name} | {r['n']} | {r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} |"
        if challenge:
            c = challenge["per_intent"][name]
            row += f" {c['n']} | {c['recall']:.3f} |"
        lines.append(row)
    lines += ["", "## Limits", "",
              "Fine-tuned on generated utterances; dev and test are held-out templates of the same "
              "generator, so real calls in other voices will score lower. "
              "The challenge set (`data/hotline/challenge.jsonl`, written freehand, never used for "
              "training or model selection) is the closer estimate of that.",
              ""]
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--run", required=True, help="training run folder (config.json, weights-*.npz)")
    ap.add_argument("--vocab", default=os.path.join(REPO, "models", "default", "vocab.txt"))
    ap.add_argument("--data", default=os.path.join(REPO, "data", "hotline"),
                    help="folder with dev.jsonl, test.jsonl and optionally challenge.jsonl")
    ap.add_argument("--out", default=os.path.join(REPO, "models", "default"))
    ap.add_argument("--name", default="default")
    ap.add_argument("--max-lines", type=int, help="only the first N dev/test lines")
    ap.add_argument("--note", action="append", default=[],
                    help="extra line for the model card's training section (repeatable)")
    ap.add_argument("--no-card", action="store_true", help="skip README.md")
    ap.add_argument("--fp32-weights", dest="fp16_weights", action="store_false",
                    help="store the weights as FP32 (default: FP16 initializers + Cast)")
    args = ap.parse_args(argv)

    model, cfg = load_run(args.run)
    tax = Taxonomy()
    if cfg["intents"] != tax.intents or cfg["tags"] != tax.tags:
        raise ValueError("the run's intents/tags differ from config/taxonomy/hotline.yaml")
    os.makedirs(args.out, exist_ok=True)
    vocab_out = os.path.join(args.out, "vocab.txt")
    if os.path.abspath(args.vocab) != os.path.abspath(vocab_out):
        shutil.copyfile(args.vocab, vocab_out)
    enc = Encoder(vocab_out, tax, cfg["max_length"])
    if enc.vocab_size != cfg["vocab_size"]:
        raise ValueError(f"vocab has {enc.vocab_size} tokens, the model expects "
                         f"{cfg['vocab_size']}")

    onnx_path = os.path.join(args.out, "model.onnx")
    if args.fp16_weights:
        round_state_dict_fp16(model)  # what the FP16-stored file computes, for the parity check
    size = export_onnx(model, onnx_path)
    if args.fp16_weights:
        n = store_fp16(onnx_path)
        size = os.path.getsize(onnx_path)
        print(f"{n} initializers stored as FP16")
    encoder = {k: v for k, v in model.state_dict().items()
               if not k.startswith(("intent_head", "slot_head", "mlm_"))}
    with open(os.path.join(args.out, "weights_map.json"), "w", encoding="utf-8") as f:
        json.dump({"encoder": {k: cfg[k] for k in ("layers", "hidden", "heads", "ffn")},
                   "weights": weight_map(encoder, onnx_path)}, f, indent=0)
    if size > MAX_ONNX_BYTES:  # the repository carries its models: keep them small
        raise ValueError(f"{onnx_path} is {size} bytes, expected at most {MAX_ONNX_BYTES}")
    print(f"wrote {onnx_path}: {size} bytes")

    results = {}
    parity = None
    splits = ["dev", "test"]
    if os.path.exists(os.path.join(args.data, "challenge.jsonl")):
        splits.append("challenge")  # hand-written, other voices: reported beside test
    for split in splits:
        rows = read_jsonl(os.path.join(args.data, split + ".jsonl"))[:args.max_lines]
        ex = [enc.encode(r) for r in rows]
        rep, intents, spans = run_parity(model, onnx_path, ex, enc.pad_id, tax)
        print(f"parity {split}: {json.dumps(rep)}")
        if rep["max_abs_diff"] > ATOL or rep["argmax_mismatches"]:
            raise AssertionError(f"ONNX Runtime and PyTorch disagree on {split}: {rep}")
        results[split] = metrics([e["intent"] for e in ex], intents, [e["spans"] for e in ex],
                                 spans, tax.intents)
        if split == "test":
            parity = rep
        m = results[split]
        print(f"{split}: intent accuracy {m['intent_accuracy']:.4f}, slot P {m['slot_precision']:.4f}"
              f" R {m['slot_recall']:.4f} F1 {m['slot_f1']:.4f} ({m['n']} lines)")

    with open(os.path.join(args.out, "labels.json"), "w", encoding="utf-8") as f:
        json.dump({"intents": tax.intents, "slot_tags": tax.tags}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    shutil.copyfile(TAXONOMY, os.path.join(args.out, "taxonomy.yaml"))
    yaml_text = "\n".join([
        f"name: {args.name}",
        'version: "1"',
        f"max_length: {cfg['max_length']}",
        "precision: fp32",
        "tokenizer: {vocab: vocab.txt, lowercase: true, normalize_width: true}",
        "files: {onnx: model.onnx, labels: labels.json, taxonomy: taxonomy.yaml}",
        "outputs: {intent: intent_logits, slots: slot_logits}",
        'profile: "1x1:8x64:32x128"',
        ""])
    cal = cfg.get("calibration")
    if cal:  # temperature-scaled intent confidence and the dialog's hand-off threshold
        yaml_text += (f"calibration: {{temperature: {{intent: {cal['temperature']:.4f}}}, "
                      f"handoff_threshold: {cal['handoff_threshold']}}}\n")
    with open(os.path.join(args.out, "model.yaml"), "w") as f:
        f.write(yaml_text)
    n_params = sum(p.numel() for k, p in model.state_dict().items() if not k.startswith("mlm_"))
    if not args.no_card:
        cfg["n_train"] = None
        cfg["notes"] = args.note
        metrics_path = os.path.join(args.run, "metrics.json")
        if os.path.exists(metrics_path):
            with open(metrics_path) as f:
                cfg["n_train"] = json.load(f).get("n_train")
        write_card(args.out, cfg, size, results["dev"], results["test"], parity, n_params,
                   results.get("challenge"))
    with open(os.path.join(args.out, "export_report.json"), "w") as f:
        json.dump({"parity_test": parity, "dev": {k: v for k, v in results["dev"].items()
                                                  if k != "per_intent"},
                   "test": {k: v for k, v in results["test"].items() if k != "per_intent"},
                   "challenge": {k: v for k, v in results.get("challenge", {}).items()
                                 if k != "per_intent"} or None,
                   "onnx_bytes": size}, f, indent=1)
    return results, parity


if __name__ == "__main__":
    main()
