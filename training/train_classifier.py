"""Fine-tunes a pretrained encoder into a work-order dispatcher: department and category of an
order's text (a city's historical orders: JSONL lines with `text`, `label` = the handling
department, and optionally `cat1`..`cat4` or `category` = a "/"-joined category path).

  python3 training/train_classifier.py --data build-train/corpus/haikou \
      --init-encoder build-train/pretrain --vocab build-train/corpus/vocab.txt --out RUN

DATA holds train.jsonl, dev.jsonl (selection and temperature) and optionally test.jsonl (reported
only). Text longer than --max-length tokens keeps its head and its tail (the caller's request
opens an order; the department asked to act closes it). Augmentation drops, with probability
--aug-strip, the closing request sentence and the boiler-plate in brackets, so that the model also
learns the department from what the order is about. Confidence is calibrated per head by
temperature scaling on dev (the ECE before and after goes to metrics.json).

Without --init-encoder the encoder starts from random weights (a CPU-only smoke run or a city
without the corpus); the run says so in its log and config.
"""
import argparse
import copy
import gzip
import json
import os
import random
import re
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calibration import ece, fit_temperature, softmax  # noqa: E402
from common import normalize_width, read_jsonl  # noqa: E402
from model import BertJoint, read_weight_arrays, write_weight_shards  # noqa: E402


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


class Classifier(nn.Module):
    """BERT encoder + pooler (dense + tanh on [CLS]) + one linear head per output."""

    def __init__(self, vocab, heads, layers, hidden, n_heads, ffn, dropout=0.1):
        super().__init__()
        self.bert = BertJoint(vocab, 1, 1, layers, hidden, n_heads, ffn, dropout)
        # The joint model's task heads are unused here; they stay out of the export.
        del self.bert.intent_head, self.bert.slot_head
        self.head_names = list(heads)
        self.heads = nn.ModuleDict({k: nn.Linear(hidden, n) for k, n in heads.items()})
        for h in self.heads.values():
            h.weight.data.normal_(0.0, 0.02)
            h.bias.data.zero_()
        self.drop = nn.Dropout(dropout)
        self.config = dict(vocab_size=vocab, heads=dict(heads), layers=layers, hidden=hidden,
                           n_heads=n_heads, ffn=ffn)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.bert.encode(input_ids, attention_mask, token_type_ids)
        pooled = self.drop(torch.tanh(self.bert.pooler(x[:, 0])))
        return tuple(self.heads[k](pooled) for k in self.head_names)


def folder_heads(folder):
    """{head: (labels, weight [n, hidden], bias [n])} of a dispatcher model folder: the head
    initializers of its model.onnx (heads.NAME.weight/.bias, FP16 or FP32) and labels.json."""
    import onnx
    from onnx import numpy_helper
    with open(os.path.join(folder, "labels.json"), encoding="utf-8") as f:
        labels = json.load(f)
    inits = {i.name: i for i in onnx.load(os.path.join(folder, "model.onnx")).graph.initializer}

    def arr(name):
        for n in (name, name + ".fp16"):
            if n in inits:
                return numpy_helper.to_array(inits[n]).astype(np.float32)
        return None
    out = {}
    for head, names in labels.items():
        w, b = arr(f"heads.{head}.weight"), arr(f"heads.{head}.bias")
        if w is not None and b is not None and len(names) == w.shape[0] == b.shape[0]:
            out[head] = (names, w, b)
    return out


def init_heads_by_label(model, folder, labels):
    """Copies the rows of the folder's heads into the model's, matched by label name (a city's
    model updated with newer orders keeps what it knew); labels the folder lacks keep their fresh
    rows. Returns {head: (rows copied, rows new)}."""
    old = folder_heads(folder)
    report = {}
    for head, names in labels.items():
        if head not in model.heads or head not in old:
            continue
        old_names, w, b = old[head]
        if w.shape[1] != model.heads[head].weight.shape[1]:
            raise SystemExit(f"--init-model {folder}: the {head} head is {w.shape[1]} wide, "
                             f"the encoder {model.heads[head].weight.shape[1]}")
        where = {n: i for i, n in enumerate(old_names)}
        same = 0
        with torch.no_grad():
            for i, n in enumerate(names):
                if n in where:
                    model.heads[head].weight[i] = torch.from_numpy(w[where[n]])
                    model.heads[head].bias[i] = float(b[where[n]])
                    same += 1
        report[head] = (same, len(names) - same)
    return report


def category_of(row):
    if row.get("category"):
        return row["category"]
    parts = [row.get(f"cat{i}") or "" for i in range(1, 5)]
    while parts and not parts[-1]:
        parts.pop()
    return "/".join(parts) if parts else None


_STRIP = [re.compile(r"[（(][^（）()]*[）)]\s*$"), re.compile(r"请[^。！!，,]{0,30}(核实|处理|协调|回复)[^。！!]*[。！!]?\s*$")]


def strip_request(text):
    """The order without its closing request sentence and bracketed boiler-plate."""
    for _ in range(2):
        for p in _STRIP:
            text = p.sub("", text).rstrip()
    return text


class Tok:
    def __init__(self, vocab_path, max_length):
        from transformers import BertTokenizerFast
        self.tok = BertTokenizerFast(vocab_path, do_lower_case=True)
        self.max_length = max_length
        self.cls, self.sep, self.pad = (self.tok.cls_token_id, self.tok.sep_token_id,
                                        self.tok.pad_token_id)

    def __call__(self, texts):
        enc = self.tok([normalize_width(t) for t in texts], add_special_tokens=False)["input_ids"]
        return [head_tail(ids, self.max_length, self.cls, self.sep) for ids in enc]


def head_tail(ids, max_length, cls, sep):
    """[CLS] ids [SEP], keeping the first (max_length - 2) // 2 + remainder tokens and the last
    (max_length - 2) // 2 when ids are too long (src/nlu does the same)."""
    keep = max_length - 2
    if len(ids) > keep:
        tail = keep // 2
        ids = ids[:keep - tail] + ids[len(ids) - tail:]
    return [cls] + list(ids) + [sep]


def pad_batch(seqs, pad, device):
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids.to(device), mask.to(device), torch.zeros_like(ids).to(device)


@torch.no_grad()
def logits_of(model, seqs, pad, device, bs=128):
    model.eval()
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    outs = [None] * len(seqs)
    for b in range(0, len(order), bs):
        idx = order[b:b + bs]
        ids, mask, tt = pad_batch([seqs[i] for i in idx], pad, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            res = model(ids, mask, tt)
        for k, i in enumerate(idx):
            outs[i] = [r[k].float().cpu().numpy() for r in res]
    return [np.stack([o[h] for o in outs]) for h in range(len(model.head_names))]


def scores(logits, gold, t=1.0):
    ok = gold >= 0
    p = softmax(logits[ok], t)
    g = gold[ok]
    top = np.argsort(-p, 1)
    out = {"n": int(ok.sum()), "top1": float((top[:, 0] == g).mean()),
           "top3": float((top[:, :3] == g[:, None]).any(1).mean()), "ece": ece(p, g)}
    return out


def load_splits(a):
    """The data's rows (text kept only when no cache is read: labels drive training)."""
    if a.cache and os.path.exists(a.cache):
        with gzip.open(a.cache, "rt", encoding="utf-8") as f:
            return json.load(f)["rows"]
    return {s: read_jsonl(os.path.join(a.data, s + ".jsonl"))
            for s in ("train", "dev", "test") if os.path.exists(os.path.join(a.data, s + ".jsonl"))}


def encode_data(a, splits, departments, categories):
    """Token ids of every split and of the stripped training texts; read from / written to
    --cache (a GPU machine then needs no tokenizer)."""
    if a.cache and os.path.exists(a.cache):
        with gzip.open(a.cache, "rt", encoding="utf-8") as f:
            d = json.load(f)
        log(f"encoded data from {a.cache}")
        return d
    if not a.vocab:
        raise SystemExit("--vocab is required to encode the data")
    tok = Tok(a.vocab, a.max_length)
    with open(a.vocab, encoding="utf-8") as f:
        vocab = sum(1 for _ in f)
    d = {"vocab_size": vocab, "pad": tok.pad, "max_length": a.max_length,
         "enc": {s: tok([r["text"] for r in rows]) for s, rows in splits.items()},
         "stripped": tok([strip_request(r["text"]) for r in splits["train"]]),
         "rows": {s: [{k: v for k, v in r.items() if k != "text"} | {"text": ""} for r in rows]
                  for s, rows in splits.items()}}
    if a.cache:
        os.makedirs(os.path.dirname(os.path.abspath(a.cache)), exist_ok=True)
        with gzip.open(a.cache, "wt", encoding="utf-8") as f:
            json.dump(d, f, ensure_ascii=False)
        log(f"wrote {a.cache}")
    return d


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", help="folder with train/dev(/test).jsonl")
    ap.add_argument("--vocab", help="vocab.txt (not needed with an existing --cache)")
    ap.add_argument("--cache", help="encoded data (.json.gz): read if present, else written")
    ap.add_argument("--encode-only", action="store_true", help="write --cache and stop")
    ap.add_argument("--init-model", help="start from a shipped model folder (model.onnx + "
                    "weights_map.json, e.g. models/haikou): its encoder, and its heads' rows for "
                    "the labels it knows; its vocab.txt is used")
    ap.add_argument("--keep-labels", action="store_true",
                    help="with --init-model: an update of that city's model; its labels the "
                    "new orders lack stay in the heads")
    ap.add_argument("--init-encoder", help="pretraining run folder (training/pretrain.py)")
    ap.add_argument("--out", help="run folder (required unless --encode-only)")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1.5e-4)
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=float, default=0.06)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--smoothing", type=float, default=0.05)
    ap.add_argument("--aug-strip", type=float, default=0.4)
    ap.add_argument("--category-weight", type=float, default=0.5)
    ap.add_argument("--time-budget", type=float, default=0, help="seconds (0: none)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (smoke runs)")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--device", default="auto")
    a = ap.parse_args(argv)
    if a.keep_labels and not a.init_model:
        ap.error("--keep-labels needs --init-model")
    t_start = time.time()
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if a.device == "auto" else a.device))
    splits = load_splits(a)
    for s in ("train", "dev"):
        if s not in splits:
            raise SystemExit(f"{a.data}/{s}.jsonl is missing")
    for s, rows in splits.items():
        for n, r in enumerate(rows, 1):
            if not isinstance(r.get("text"), str) or not (r["text"].strip() or a.cache):
                raise SystemExit(f"{a.data}/{s}.jsonl line {n}: no text")
            if not isinstance(r.get("label"), str) or not r["label"]:
                raise SystemExit(f"{a.data}/{s}.jsonl line {n}: no label (department)")
    train = splits["train"]
    # Labels in order of training frequency (ties by name): the folder's labels.json order.
    from collections import Counter
    dep_count = Counter(r["label"] for r in train)
    departments = sorted(dep_count, key=lambda k: (-dep_count[k], k))
    cat_count = Counter(c for c in map(category_of, train) if c)
    categories = sorted(cat_count, key=lambda k: (-cat_count[k], k))
    if a.keep_labels:
        # An update of a city's model keeps every label the folder knows, also those the new
        # orders lack (a department with no order this month still exists): they follow.
        with open(os.path.join(a.init_model, "labels.json"), encoding="utf-8") as f:
            known = json.load(f)
        departments += [k for k in known.get("department", []) if k not in dep_count]
        categories += [k for k in known.get("category", []) if k not in cat_count]
    heads = {"department": len(departments)}
    if categories:
        heads["category"] = len(categories)
    dep_index = {k: i for i, k in enumerate(departments)}
    cat_index = {k: i for i, k in enumerate(categories)}

    data = encode_data(a, splits, departments, categories)
    if a.encode_only:
        return None
    if not a.out:
        ap.error("--out is required unless --encode-only")
    vocab = data["vocab_size"]
    pad = data["pad"]
    if data["max_length"] != a.max_length:
        raise SystemExit(f"--cache was encoded at max length {data['max_length']}, not "
                         f"{a.max_length}")
    init_cfg = None
    if a.init_model:
        if a.init_encoder:
            ap.error("--init-model and --init-encoder exclude each other")
        from onnx_fp16 import load_mapped
        sd, dims = load_mapped(a.init_model)
        init_cfg = dict(dims, vocab_size=int(sd["word.weight"].shape[0]), step=None,
                        from_model=a.init_model)
        for k in ("layers", "hidden", "heads", "ffn"):
            setattr(a, k, init_cfg[k])
        if init_cfg["vocab_size"] != vocab:
            raise SystemExit(f"--init-model has a vocabulary of {init_cfg['vocab_size']}, the "
                             f"data was encoded with {vocab}")
    if a.init_encoder:
        with open(os.path.join(a.init_encoder, "config.json")) as f:
            init_cfg = json.load(f)
        for k in ("layers", "hidden", "heads", "ffn"):
            setattr(a, k, init_cfg[k])
        if init_cfg["vocab_size"] != vocab:
            raise SystemExit(f"--init-encoder has a vocabulary of {init_cfg['vocab_size']}, "
                             f"{a.vocab} has {vocab}")
    model = Classifier(vocab, heads, a.layers, a.hidden, a.heads, a.ffn, a.dropout)
    if a.init_model:
        missing, unexpected = model.bert.load_state_dict(
            {k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
        missing = [k for k in missing if not k.startswith("mlm_")]
        if missing or unexpected:
            raise SystemExit(f"--init-model weights do not fit: missing {missing}, "
                             f"unexpected {unexpected}")
        log(f"encoder from the model folder {a.init_model}")
        for name, (n_same, n_new) in init_heads_by_label(
                model, a.init_model, {"department": departments, "category": categories}).items():
            log(f"{name} head: {n_same} labels' rows from the model folder, {n_new} new")
    if a.init_encoder:
        sd = {k: torch.from_numpy(v) for k, v in read_weight_arrays(a.init_encoder).items()
              if not k.startswith(("intent_head", "slot_head"))}
        missing, unexpected = model.bert.load_state_dict(sd, strict=False)
        missing = [k for k in missing if not k.startswith("mlm_")]
        if missing or unexpected:
            raise SystemExit(f"--init-encoder weights do not fit: missing {missing}, "
                             f"unexpected {unexpected}")
        log(f"encoder from {a.init_encoder} (pretrained step {init_cfg.get('step')})")
    elif not a.init_model:
        log("no --init-encoder: the encoder starts from random weights")
    model.to(device)

    def gold_of(rows):
        d = np.asarray([dep_index.get(r["label"], -1) for r in rows])
        c = np.asarray([cat_index.get(category_of(r), -1) for r in rows])
        return d, c
    enc, stripped = data["enc"], data["stripped"]
    gold = {s: gold_of(rows) for s, rows in splits.items()}
    log(f"device {device}; {len(train)} train, {len(splits['dev'])} dev, "
        f"{len(splits.get('test', []))} test; {len(departments)} departments, "
        f"{len(categories)} category paths")

    enc_params = [p for n, p in model.named_parameters() if not n.startswith("heads.")]
    opt = torch.optim.AdamW([{"params": enc_params, "lr": a.lr},
                             {"params": model.heads.parameters(), "lr": a.head_lr}],
                            weight_decay=0.01)
    steps_per_epoch = (len(train) + a.batch_size - 1) // a.batch_size
    total = steps_per_epoch * a.epochs
    if a.max_steps:
        total = min(total, a.max_steps)
    warm = max(1, int(total * a.warmup))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * max(0.0, (total - s) / max(1, total - warm)))
    best, best_score, history, step = None, -1.0, [], 0
    rng = random.Random(a.seed)
    for epoch in range(1, a.epochs + 1):
        model.train()
        order = list(range(len(train)))
        rng.shuffle(order)
        t0 = time.time()
        for b in range(0, len(order), a.batch_size):
            idx = order[b:b + a.batch_size]
            seqs = [stripped[i] if rng.random() < a.aug_strip else enc["train"][i] for i in idx]
            ids, mask, tt = pad_batch(seqs, pad, device)
            gd = torch.tensor(gold["train"][0][idx], device=device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                outs = model(ids, mask, tt)
            loss = F.cross_entropy(outs[0].float(), gd, label_smoothing=a.smoothing)
            if "category" in heads:
                gc = torch.tensor(gold["train"][1][idx], device=device)
                loss = loss + a.category_weight * F.cross_entropy(
                    outs[1].float(), gc, ignore_index=-1, label_smoothing=a.smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            if step >= total:
                break
        dl = logits_of(model, enc["dev"], pad, device)
        m = scores(dl[0], gold["dev"][0])
        history.append({"epoch": epoch, "dev_department_top1": m["top1"],
                        "seconds": round(time.time() - t0, 1)})
        log(f"epoch {epoch}: loss {loss.item():.3f} dev department top-1 {m['top1']:.4f} "
            f"top-3 {m['top3']:.4f} ({time.time() - t0:.0f}s)")
        if m["top1"] > best_score:
            best_score = m["top1"]
            best = copy.deepcopy({k: v.detach().cpu() for k, v in model.state_dict().items()})
        if step >= total or (a.time_budget and time.time() - t_start > a.time_budget):
            break
    model.load_state_dict(best)
    result = {"history": history, "departments": len(departments), "categories": len(categories)}
    dl = logits_of(model, enc["dev"], pad, device)
    temps = {}
    for h, name in enumerate(model.head_names):
        temps[name] = fit_temperature(dl[h], gold["dev"][h])
    for s in enc:
        if s == "train":
            continue
        lg = logits_of(model, enc[s], pad, device)
        res = {}
        for h, name in enumerate(model.head_names):
            raw = scores(lg[h], gold[s][h])
            cal = scores(lg[h], gold[s][h], temps[name])
            res[name] = dict(raw, ece_calibrated=cal["ece"])
        if "category" in heads:  # top-level category through the predicted path
            pred = lg[1].argmax(1)
            c1 = np.asarray([categories[p].split("/")[0] for p in pred])
            g1 = np.asarray([(category_of(r) or "").split("/")[0] for r in splits[s]])
            res["category_level1"] = float((c1 == g1).mean())
        result[s] = res
        log(f"{s}: " + json.dumps(res, ensure_ascii=False))
    result["temperature"] = temps
    os.makedirs(a.out, exist_ok=True)
    write_weight_shards(a.out, {k: v.detach().float().cpu().numpy()
                                for k, v in model.state_dict().items()})
    cfg = dict(model.config, kind="classifier", max_length=a.max_length,
               labels={"department": departments, "category": categories},
               temperature=temps, args=vars(a), init_encoder=init_cfg and {
                   k: init_cfg.get(k) for k in ("step", "seen_tokens", "pretrain")},
               torch=torch.__version__, device=str(device),
               train_seconds=round(time.time() - t_start, 1))
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    with open(os.path.join(a.out, "metrics.json"), "w") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
    log(f"wrote {a.out}")
    return result


if __name__ == "__main__":
    main()
