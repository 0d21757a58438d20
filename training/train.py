"""Train the joint intent + slot model from scratch (optionally after a short MLM pretraining).

Typical use (CPU; on a GPU machine add nothing, CUDA is picked up when present):

  python3 training/make_vocab.py --out models/default/vocab.txt --data data/hotline/*.jsonl
  python3 training/train.py --data data/hotline --out build-train/run1
  python3 training/export.py --run build-train/run1 --out models/default

Data: DIR/{train,dev,test}.jsonl in the taxonomy's format (config/taxonomy/README.md), and
optionally DIR/calib.jsonl (unlabelled text, used for MLM pretraining only). Texts are width-
normalised and tokenised with transformers' BertTokenizer(vocab, do_lower_case=True); slot spans
(code points) become per-token BIO tags. --encode-only writes the encoded data set (JSON, gzip) so
that a machine with another transformers version can train from it with --cache.

Each epoch prints dev intent accuracy and slot F1 (exact type and span); the epoch with the best
dev score (mean of the two) is kept and finally evaluated on test. The run folder gets
config.json, metrics.json and weights-*.npz (float32, sharded under 12 MB each).
Seeded: the same command, data and device give the same model.
"""
import argparse
import collections
import copy
import gzip
import hashlib
import json
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calibration import ece, fit_temperature, handoff_threshold, softmax  # noqa: E402
from common import IGNORE, MIN_SPAN_CHARS, REPO, Encoder, Taxonomy, decode_spans, metrics, read_jsonl  # noqa
from model import (BertJoint, export_state_dict, load_weights, read_weight_arrays,  # noqa
                   write_weight_shards)  # noqa: E402

FILLERS = ["嗯", "那个", "就是", "就是说", "啊", "呃", "然后", "这个", "那什么", "对", "哎",
           "我跟你说", "你听我说", "怎么说呢", "反正", "喂"]


def log(*a):
    print(*a, flush=True)


# ----------------------------------------------------------------------------- data

def file_sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def asr_tables(vocab_path):
    """Token tables for ASR-style noise: homophones (same toneless pinyin, among the 3,755
    commonest hanzi, GB 2312 level 1) of every CJK token, and the punctuation tokens."""
    from pypinyin import Style, lazy_pinyin
    with open(vocab_path, encoding="utf-8") as f:
        tokens = [t.rstrip("\n") for t in f]
    common = set()
    for hi in range(0xB0, 0xD8):
        for lo in range(0xA1, 0xFF):
            try:
                common.add(bytes([hi, lo]).decode("gb2312"))
            except UnicodeDecodeError:
                pass
    by_sound, sound = {}, {}
    for i, t in enumerate(tokens):
        if len(t) == 1 and "\u4e00" <= t <= "\u9fff":
            py = lazy_pinyin(t, style=Style.NORMAL)[0]
            sound[i] = py
            if t in common:
                by_sound.setdefault(py, []).append(i)
    homophones = {i: [j for j in by_sound.get(py, []) if j != i] for i, py in sound.items()}
    punct = [i for i, t in enumerate(tokens)
             if len(t) == 1 and (t in "，。、；：？！…,.;:?!~～·—-" or t in "“”‘’\"'（）()")]
    return {"homophones": {str(k): v for k, v in homophones.items() if v}, "punct": punct}


def slim(ex):
    """What training reads of an encoded line (the cache keeps no offsets or text for train)."""
    return {k: ex[k] for k in ("ids", "tags", "intent", "spans")}


def encode_splits(data_dir, vocab, tax, max_length, max_lines=None, extra_train=()):
    enc = Encoder(vocab, tax, max_length)
    out = {"vocab_sha": file_sha(vocab), "vocab_size": enc.vocab_size, "max_length": max_length,
           "special": {"pad": enc.pad_id, "unk": enc.unk_id, "cls": enc.cls_id,
                       "sep": enc.sep_id, "mask": enc.mask_id},
           "fillers": [enc.tokenize(w)[0][1:-1] for w in FILLERS], "splits": {}}
    for split in ("train", "dev", "test", "calib", "challenge"):
        path = os.path.join(data_dir, split + ".jsonl")
        if not os.path.exists(path):
            if split in ("calib", "challenge"):
                continue
            raise FileNotFoundError(f"expected {path}")
        rows = read_jsonl(path)[:max_lines]
        if split == "train":
            for p in extra_train:
                more = read_jsonl(p)
                rows = rows + more
                log(f"train: {len(more)} lines from {p}")
        if split == "calib":
            out["splits"][split] = [{"ids": enc.tokenize(r["text"])[0]} for r in rows]
        else:
            out["splits"][split] = [enc.encode(r) for r in rows]
            if split == "train":  # training reads ids, tags and intent only: a smaller cache
                out["splits"][split] = [slim(ex) for ex in out["splits"][split]]
        log(f"encoded {split}: {len(rows)} lines")
    out["asr"] = asr_tables(vocab)
    return out


def load_data(args, tax):
    if args.cache and os.path.exists(args.cache) and not args.encode_only:
        with gzip.open(args.cache, "rt", encoding="utf-8") as f:
            data = json.load(f)
        log(f"loaded encoded data from {args.cache}")
        extra = getattr(args, "extra_train", None) or []
        if extra:  # appended to the cached training split, encoded with the cache's vocabulary
            if not args.vocab or file_sha(args.vocab) != data["vocab_sha"]:
                raise ValueError(f"--extra-train with --cache {args.cache}: --vocab must be the "
                                 f"vocabulary the cache was encoded with (sha {data['vocab_sha']})")
            enc = Encoder(args.vocab, tax, data["max_length"])
            for p in extra:
                rows = read_jsonl(p)
                data["splits"]["train"] += [slim(enc.encode(r)) for r in rows]
                log(f"train: {len(rows)} lines from {p} appended")
    else:
        data = encode_splits(args.data, args.vocab, tax, args.max_length, args.max_lines,
                             args.extra_train)
        if args.cache:
            os.makedirs(os.path.dirname(os.path.abspath(args.cache)), exist_ok=True)
            with gzip.open(args.cache, "wt", encoding="utf-8") as f:
                json.dump(data, f, ensure_ascii=False)
            log(f"wrote {args.cache}")
    for split in ("train", "dev", "test", "challenge"):
        for ex in data["splits"].get(split, []):
            if "offsets" in ex:
                ex["offsets"] = [tuple(o) for o in ex["offsets"]]
            if "spans" in ex:
                ex["spans"] = [tuple(s) for s in ex["spans"]]
    return data


def span_pieces(ids, tags, tax):
    """[(start, end, slot)] token ranges of the tagged spans in one example."""
    out = []
    t = 1
    while t < len(ids) - 1:
        name = tax.tags[tags[t]] if tags[t] >= 0 else "O"
        if name != "O":
            s = t
            t += 1
            while t < len(ids) - 1 and tags[t] >= 0 and tax.tags[tags[t]] == "I-" + name[2:]:
                t += 1
            out.append((s, t, name[2:]))
        else:
            t += 1
    return out


NOVEL_SLOTS = ("organization", "address")


def a_asr(args):
    return getattr(args, "aug_asr", 0.0) or 0.0


class Augmenter:
    """Cheap token-level augmentation of one training example (never crosses a span)."""

    def __init__(self, data, tax, args, rng):
        self.tax, self.args, self.rng = tax, args, rng
        self.fillers = data["fillers"]
        # (intent, slot) -> token id sequences seen in training. Values are swapped only within
        # one intent: an item or organization often decides the intent (身份证 for id_card,
        # 社保卡 for social_security_card, a vaccine for vaccination), and a swap across intents
        # taught the model that those words do not matter (id_card <-> social_security_card was
        # the top dev confusion).
        self.pool = {}
        for ex in data["splits"]["train"]:
            for s, e, slot in span_pieces(ex["ids"], ex["tags"], tax):
                self.pool.setdefault((ex["intent"], slot), []).append(ex["ids"][s:e])
        self.max_length = data["max_length"]
        # Characters of the names seen in training (organisations, addresses, people) and the
        # commonest hanzi: the stems of --aug-novel's made-up names.
        asr = data.get("asr") or {}
        self.homophones = {int(k): v for k, v in asr.get("homophones", {}).items()}
        # Less the 300 characters commonest outside spans (的, 了, 叫, 在...): a stem made of
        # them would teach spans to swallow the words around them.
        outside = collections.Counter(t for ex in data["splits"]["train"]
                                      for t, g in zip(ex["ids"], ex["tags"]) if g == 0)
        stop = {t for t, _ in outside.most_common(300)}
        self.common = sorted({j for v in self.homophones.values() for j in v} - stop)
        self.name_chars = sorted({t for (_, slot), vals in self.pool.items()
                                  if slot in NOVEL_SLOTS + ("person_name",) for v in vals for t in v
                                  if t in self.homophones})
        self.punct = set(asr.get("punct", []))
        self.places, self.place_intents, self.seps = [], set(), []
        if getattr(args, "aug_place", 0.0) > 0 or getattr(args, "aug_tail_place", 0.0) > 0:
            self._load_places(data)
        if a_asr(args) > 0 and not self.homophones:
            raise ValueError("--aug-asr needs the encoded data's ASR tables: re-encode (--cache)")

    def _load_places(self, data):
        """Token ids of made-up places of the kinds the generator's address pools lack (rivers,
        markets, villages said alone, highways: data_gen/pools.natural_place)."""
        a = self.args
        if not a.vocab or file_sha(a.vocab) != data["vocab_sha"]:
            raise ValueError("--aug-place / --aug-tail-place: --vocab must be the vocabulary the "
                             f"data was encoded with (sha {data['vocab_sha']})")
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_gen"))
        import pools
        enc = Encoder(a.vocab, self.tax, self.max_length)
        prng = random.Random(a.seed + 17)
        names = sorted({pools.natural_place(prng) for _ in range(20000)})
        self.places = [enc.tokenize(n)[0][1:-1] for n in names]
        self.seps = [[], enc.tokenize("，")[0][1:-1]]
        # Intents whose calls carry an address at all: only there does a trailing place belong.
        self.place_intents = {i for (i, slot) in self.pool if slot == "address"}

    def place(self, ids, tags):
        """Address values replaced by made-up places of other kinds (水库, 菜市场, 赵庄)."""
        rng = self.rng
        return self.respan(ids, tags, lambda old, slot: rng.choice(self.places)
                           if slot == "address" and rng.random() >= 0.5 else None)

    def tail_place(self, ex, ids, tags):
        """A place said as an afterthought at the end (河里漂满了死鱼 清水河), for a call that
        named none: callers often give the problem first and the place last."""
        tax, rng = self.tax, self.rng
        if ex["intent"] not in self.place_intents or any(t == IGNORE for t in tags[1:-1]):
            return ids, tags
        if any(slot in ("address", "district") for _, _, slot in span_pieces(ids, tags, tax)):
            return ids, tags
        pool = self.pool.get((ex["intent"], "address"))
        val = rng.choice(self.places) if rng.random() < 0.6 or not pool else rng.choice(pool)
        sep = rng.choice(self.seps)
        lab = [tax.tag_index["B-address"]] + [tax.tag_index["I-address"]] * (len(val) - 1)
        return ids[:-1] + sep + val + ids[-1:], tags[:-1] + [0] * len(sep) + lab + tags[-1:]

    def asr_noise(self, ids, tags):
        """What a speech recogniser makes of the text: punctuation gone (often), characters
        heard as homophones (outside spans more than inside), a stutter."""
        rng = self.rng
        if self.punct and rng.random() < 0.6:
            keep = [t for t in range(len(ids)) if not (ids[t] in self.punct and tags[t] == 0)]
            ids = [ids[t] for t in keep]
            tags = self._repair([tags[t] for t in keep])
        ids = list(ids)
        for t in range(1, len(ids) - 1):
            p = 0.06 if tags[t] == 0 else 0.02
            if ids[t] in self.homophones and rng.random() < p:
                ids[t] = rng.choice(self.homophones[ids[t]])
        if rng.random() < 0.2 and len(ids) > 4:
            cands = [t for t in range(1, len(ids) - 1) if tags[t] == 0]
            if cands:
                t = rng.choice(cands)
                n = 1 if rng.random() < 0.7 else 2
                if all(tags[u] == 0 for u in range(t, min(t + n, len(ids) - 1))):
                    piece = ids[t:t + n]
                    ids = ids[:t] + piece + ids[t:]
                    tags = tags[:t] + [0] * len(piece) + tags[t:]
        return ids, tags

    def respan(self, ids, tags, value):
        """Each span whose value(ids[s:e], slot) is not None gets those token ids instead,
        labelled as the same slot; the text around the spans stays as it is."""
        tax = self.tax
        new_ids, new_tags, prev = [], [], 0
        for s, e, slot in span_pieces(ids, tags, tax):
            val = value(ids[s:e], slot)
            if val is None:
                continue
            new_ids += ids[prev:s] + val
            new_tags += tags[prev:s] + [tax.tag_index["B-" + slot]] + \
                [tax.tag_index["I-" + slot]] * (len(val) - 1)
            prev = e
        return new_ids + ids[prev:], new_tags + tags[prev:]

    def novel(self, ids, tags):
        """Organisation and address values given a made-up stem: the value's first tokens
        replaced by 1-4 random name or common characters, its tail (店, 有限公司, 小区3幢)
        kept. Real names are mostly unseen ones (业之峰装饰, 湘味人家), and a model that knows
        only the training stems cuts them at the first unfamiliar character."""
        rng = self.rng
        if not self.common:
            raise ValueError("--aug-novel needs the encoded data's ASR tables: re-encode (--cache)")

        def value(old, slot):
            if slot not in NOVEL_SLOTS or len(old) < 2 or rng.random() < 0.3:
                return None
            keep = rng.randint(1, min(4, len(old) - 1))
            stem = [rng.choice(self.name_chars if rng.random() < 0.5 else self.common)
                    for _ in range(rng.randint(1, 4))]
            return stem + old[len(old) - keep:]
        return self.respan(ids, tags, value)

    def garbled(self, ex):
        """Noise built from a real example: its tokens shuffled, or random common characters."""
        rng = self.rng
        body = list(ex["ids"][1:-1])
        if rng.random() < 0.5 and len(body) > 3:
            rng.shuffle(body)
        else:
            pool = list(self.homophones)
            body = [rng.choice(pool) for _ in range(rng.randint(2, 12))]
        ids = [ex["ids"][0]] + body + [ex["ids"][-1]]
        return ids, [IGNORE] + [0] * len(body) + [IGNORE]

    def __call__(self, ex):
        a, rng = self.args, self.rng
        ids, tags = list(ex["ids"]), list(ex["tags"])
        if a.aug_swap > 0 and rng.random() < a.aug_swap:  # replace slot values by others
            ids, tags = self.respan(ids, tags,
                                    lambda old, slot: rng.choice(self.pool[(ex["intent"], slot)]))
        if getattr(a, "aug_novel", 0.0) > 0 and rng.random() < a.aug_novel:
            ids, tags = self.novel(ids, tags)
        if getattr(a, "aug_place", 0.0) > 0 and rng.random() < a.aug_place:
            ids, tags = self.place(ids, tags)
        if getattr(a, "aug_tail_place", 0.0) > 0 and rng.random() < a.aug_tail_place:
            ids, tags = self.tail_place(ex, ids, tags)
        if a.aug_drop > 0 and rng.random() < a.aug_drop and len(ids) > 6:  # character dropout
            keep = [t for t in range(len(ids)) if tags[t] != 0 or rng.random() > 0.1]
            if len(keep) < len(ids):
                # Removing an O token between two pieces of the same type could join two spans.
                ids = [ids[t] for t in keep]
                tags = [tags[t] for t in keep]
                tags = self._repair(tags)
        if a.aug_filler > 0 and rng.random() < a.aug_filler:  # filler insertion outside spans
            cands = [t for t in range(1, len(ids)) if not self._inside(tags[t])]
            t = rng.choice(cands)
            f = rng.choice(self.fillers)
            ids = ids[:t] + f + ids[t:]
            tags = tags[:t] + [0] * len(f) + tags[t:]
        if a_asr(a) > 0 and rng.random() < a.aug_asr:
            ids, tags = self.asr_noise(ids, tags)
        if len(ids) > self.max_length:
            ids = ids[:self.max_length - 1] + [ids[-1]]
            tags = self._repair(tags[:self.max_length - 1] + [IGNORE])
        return ids, tags

    def _inside(self, tag):
        return tag >= 0 and self.tax.tags[tag].startswith("I-")

    def _repair(self, tags):
        # An I-x that no longer follows B-x/I-x would decode as a new span: make it B-x.
        out = list(tags)
        for t in range(1, len(out)):
            if self._inside(out[t]):
                slot = self.tax.tags[out[t]][2:]
                prev = self.tax.tags[out[t - 1]] if out[t - 1] >= 0 else "O"
                if prev[2:] != slot or prev == "O":
                    out[t] = self.tax.tag_index["B-" + slot]
        return out


def pad_batch(seqs, pad, device, labels=None):
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    lab = torch.full((len(seqs), n), IGNORE, dtype=torch.long) if labels is not None else None
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
        if labels is not None:
            lab[i, :len(s)] = torch.tensor(labels[i])
    tt = torch.zeros_like(ids)
    out = [ids.to(device), mask.to(device), tt.to(device)]
    if labels is not None:
        out.append(lab.to(device))
    return out


def make_batches(examples, batch_size, rng, pool=50):
    """Shuffled batches of similar length (less padding): shuffle, sort within pools of
    `pool` batches by length, cut into batches, shuffle the batches."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    batches = []
    step = batch_size * pool
    for p in range(0, len(order), step):
        chunk = sorted(order[p:p + step], key=lambda i: len(examples[i]["ids"]))
        batches += [chunk[b:b + batch_size] for b in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


# ----------------------------------------------------------------------------- training

def lr_lambda(warmup, total):
    def f(step):
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    return f


class WeightEma:
    """Exponential moving average of a model's floating-point weights (buffers copied as they
    are): after each optimiser step, ema = decay * ema + (1 - decay) * weight. The average of
    the late fine-tuning weights generalises better than the last step's (Polyak averaging);
    swap() exchanges the live weights and the average in place (evaluate, then swap back)."""

    def __init__(self, model, decay):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.params = [p for p in model.parameters() if p.dtype.is_floating_point]
        self.shadow = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def update(self):
        torch._foreach_mul_(self.shadow, self.decay)
        torch._foreach_add_(self.shadow, [p.detach() for p in self.params], alpha=1 - self.decay)

    @torch.no_grad()
    def swap(self):
        for p, s in zip(self.params, self.shadow):
            tmp = p.detach().clone()
            p.copy_(s)
            s.copy_(tmp)


def make_optimizer(model, lr, wd):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.dim() < 2 or "ln" in n else decay).append(p)
    # One fused kernel per step on a GPU instead of a dozen per parameter tensor (the small model's
    # step is bound by launches there); the same arithmetic.
    extra = {"fused": True} if next(model.parameters()).is_cuda else {}
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, **extra)


def pretrain_mlm(model, data, args, device, rng):
    sp = data["special"]
    texts = [ex["ids"] for ex in data["splits"]["train"]]
    texts += [ex["ids"] for ex in data["splits"].get("calib", [])]
    vocab = data["vocab_size"]
    opt = make_optimizer(model, args.mlm_lr, args.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(args.mlm_steps // 10, args.mlm_steps))
    model.train()
    t0 = time.time()
    for step in range(args.mlm_steps):
        batch = [rng.choice(texts) for _ in range(args.batch_size)]
        labels = []
        inputs = []
        for ids in batch:
            inp, lab = list(ids), [IGNORE] * len(ids)
            for t in range(1, len(ids) - 1):
                if rng.random() < 0.15:
                    lab[t] = ids[t]
                    r = rng.random()
                    if r < 0.8:
                        inp[t] = sp["mask"]
                    elif r < 0.9:
                        inp[t] = rng.randrange(5, vocab)
            inputs.append(inp)
            labels.append(lab)
        ids, mask, tt, lab = pad_batch(inputs, sp["pad"], device, labels)
        h = model.encode(ids, mask, tt)
        sel = lab != IGNORE
        if not sel.any():
            continue
        loss = F.cross_entropy(model.mlm_logits(h[sel]), lab[sel])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if (step + 1) % max(1, args.mlm_steps // 10) == 0:
            log(f"mlm step {step + 1}/{args.mlm_steps} loss {loss.item():.3f} "
                f"({time.time() - t0:.0f}s)")


@torch.no_grad()
def predict(model, examples, pad, device, batch_size=128):
    model.eval()
    intents, tags = [], []
    order = sorted(range(len(examples)), key=lambda i: len(examples[i]["ids"]))
    res_i, res_t = [None] * len(examples), [None] * len(examples)
    for b in range(0, len(order), batch_size):
        idx = order[b:b + batch_size]
        ids, mask, tt = pad_batch([examples[i]["ids"] for i in idx], pad, device)
        il, sl = model(ids, mask, tt)
        il, sl = il.argmax(-1).tolist(), sl.argmax(-1).tolist()
        for k, i in enumerate(idx):
            res_i[i] = il[k]
            res_t[i] = sl[k][:len(examples[i]["ids"])]
    intents, tags = res_i, res_t
    return intents, tags


@torch.no_grad()
def intent_logits(model, examples, pad, device, batch_size=128):
    """Intent logits [n, n_intents] of `examples`, in their order (float64, on the host)."""
    model.eval()
    out = np.zeros((len(examples), model.config["n_intents"]))
    order = sorted(range(len(examples)), key=lambda i: len(examples[i]["ids"]))
    for b in range(0, len(order), batch_size):
        idx = order[b:b + batch_size]
        ids, mask, tt = pad_batch([examples[i]["ids"] for i in idx], pad, device)
        il, _ = model(ids, mask, tt)
        out[idx] = il.double().cpu().numpy()
    return out


def evaluate(model, examples, tax, pad, device, min_span=MIN_SPAN_CHARS):
    intents, tags = predict(model, examples, pad, device)
    spans_pred = [decode_spans(t, ex["offsets"], tax.tags, ex.get("text"), min_span)
                  for t, ex in zip(tags, examples)]
    return metrics([ex["intent"] for ex in examples], intents,
                   [ex["spans"] for ex in examples], spans_pred, tax.intents)


def save_run(out_dir, model, cfg, result):
    os.makedirs(out_dir, exist_ok=True)
    write_weight_shards(out_dir, {k: v.detach().float().cpu().numpy()
                                  for k, v in export_state_dict(model).items()})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(out_dir, "metrics.json"), "w") as f:
        json.dump(result, f, indent=1)


def run_config(model, data, tax, args, argv, device, best_epoch, epochs_run):
    return dict(model.config, max_length=data["max_length"], vocab_sha=data["vocab_sha"],
                intents=tax.intents, tags=tax.tags, args=vars(args), best_epoch=best_epoch,
                epochs_run=epochs_run, torch=torch.__version__, device=str(device),
                command="python3 training/train.py " + " ".join(sys.argv[1:] if argv is None
                                                                else argv))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default=os.path.join(REPO, "data", "hotline"),
                    help="folder with train/dev/test(/calib).jsonl")
    ap.add_argument("--vocab", default=os.path.join(REPO, "models", "default", "vocab.txt"))
    ap.add_argument("--cache", help="encoded data set (.json.gz): read if present, else written")
    ap.add_argument("--encode-only", action="store_true", help="write --cache and stop")
    ap.add_argument("--out", help="run folder for config.json, metrics.json, weights-*.npz")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--max-lines", type=int, help="use only the first N lines of each split")
    # Shape: defaults 4 / 256 / 4 / 1024, or --init's (a run continued keeps its shape).
    ap.add_argument("--layers", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--ffn", type=int)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--max-steps", type=int, help="stop fine-tuning after N steps (smoke tests)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup", type=float, default=0.06, help="fraction of steps")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--slot-weight", type=float, default=1.0, help="slot loss weight")
    ap.add_argument("--intent-smoothing", type=float, default=0.0,
                    help="label smoothing of the intent loss (0: off)")
    ap.add_argument("--ema", type=float, default=0.0,
                    help="evaluate and keep an exponential moving average of the fine-tuning "
                         "weights with this decay, e.g. 0.999 (0: off, the live weights)")
    ap.add_argument("--init", help="start from this run folder's weights (fine-tuning on new data)")
    ap.add_argument("--init-encoder", help="start the encoder from a pretraining run folder "
                    "(training/pretrain.py); its size is taken from there, the heads start fresh")
    ap.add_argument("--taxonomy", default=None, help="taxonomy YAML (default: config/taxonomy)")
    ap.add_argument("--extra-train", nargs="*", default=[],
                    help="JSONL files added to the training split (e.g. real out-of-scope text)")
    ap.add_argument("--aug-asr", type=float, default=0.0,
                    help="P(ASR-style noise: homophones, punctuation dropped, stutters)")
    ap.add_argument("--garble", type=float, default=0.0,
                    help="garbled sequences per real one, trained toward a uniform intent "
                    "(low confidence on noise)")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast on CUDA")
    ap.add_argument("--mlm-steps", type=int, default=0, help="MLM pretraining steps first")
    ap.add_argument("--mlm-lr", type=float, default=5e-4)
    ap.add_argument("--aug-swap", type=float, default=0.3,
                    help="P(replace slot values by other training values of the same type and intent)")
    ap.add_argument("--aug-novel", type=float, default=0.0,
                    help="P(organisation/address values get a made-up stem, their tail kept)")
    ap.add_argument("--aug-place", type=float, default=0.0,
                    help="P(address values become made-up places of other kinds: rivers, "
                    "markets, villages, highways; needs --vocab)")
    ap.add_argument("--aug-tail-place", type=float, default=0.0,
                    help="P(a call without a place gets one appended at its end; needs --vocab)")
    ap.add_argument("--aug-drop", type=float, default=0.2, help="P(character dropout, 10%% of O)")
    ap.add_argument("--aug-filler", type=float, default=0.2, help="P(insert a filler word)")
    ap.add_argument("--time-budget", type=float,
                    help="seconds: after epoch 1, cut the epochs (and the LR schedule) to fit")
    ap.add_argument("--save-every-best", action="store_true",
                    help="write the run folder at every dev improvement, not only at the end")
    ap.add_argument("--log-every", type=int, default=100, help="log every N steps (0: off)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--fast", action="store_true",
                    help="GPU: allow non-deterministic kernels and TF32 (faster; digits not repeatable)")
    ap.add_argument("--min-span-chars", type=int, default=MIN_SPAN_CHARS,
                    help="evaluation: drop decoded spans shorter than this (1 for CAIS-style data)")
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda")
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    args = ap.parse_args(argv)
    if not (args.ema == 0.0 or 0.0 < args.ema < 1.0):  # a negative value is no silent "off"
        ap.error(f"--ema must be 0 (off) or in (0, 1), got {args.ema}")
    if not 0.0 <= args.intent_smoothing < 1.0:
        ap.error(f"--intent-smoothing must be in [0, 1), got {args.intent_smoothing}")

    tax = Taxonomy(args.taxonomy) if args.taxonomy else Taxonomy()
    data = load_data(args, tax)
    if args.encode_only:
        return None
    if not args.out:
        ap.error("--out is required unless --encode-only")

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if args.device == "auto" else args.device))
    if device.type == "cuda" and not args.fast:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cuda.matmul.allow_tf32 = False
    elif args.fast:
        log("--fast: non-deterministic CUDA kernels; a rerun will not repeat this run's digits")
    rng = random.Random(args.seed)

    train, dev, test = (data["splits"][s] for s in ("train", "dev", "test"))
    pad = data["special"]["pad"]
    icfg = None
    if args.init:
        with open(os.path.join(args.init, "config.json")) as f:
            icfg = json.load(f)
    if args.init_encoder:
        if args.init:
            ap.error("--init and --init-encoder exclude each other")
        with open(os.path.join(args.init_encoder, "config.json")) as f:
            icfg = json.load(f)
        if icfg["vocab_size"] != data["vocab_size"]:
            raise ValueError(f"--init-encoder {args.init_encoder}: vocabulary of "
                             f"{icfg['vocab_size']}, the data's is {data['vocab_size']}")
    for k, default in (("layers", 4), ("hidden", 256), ("heads", 4), ("ffn", 1024)):
        if getattr(args, k) is None:
            setattr(args, k, icfg[k] if icfg else default)
    model = BertJoint(data["vocab_size"], len(tax.intents), len(tax.tags), args.layers,
                      args.hidden, args.heads, args.ffn, args.dropout).to(device)
    n_params = sum(p.numel() for k, p in export_state_dict(model).items())
    log(f"device {device}, {len(train)} train / {len(dev)} dev / {len(test)} test lines, "
        f"exported parameters {n_params:,} ({n_params * 4 / 2**20:.1f} MiB fp32)")

    if args.init:
        for k in ("vocab_size", "layers", "hidden", "heads", "ffn"):
            if icfg[k] != model.config[k]:
                raise ValueError(f"--init {args.init}: {k} is {icfg[k]}, this run has "
                                 f"{model.config[k]}")
        load_weights(model, args.init)
        model.to(device)
        log(f"initialised from {args.init}")
    if args.init_encoder:
        sd = {k: torch.from_numpy(np.asarray(v, np.float32))
              for k, v in read_weight_arrays(args.init_encoder).items()
              if not k.startswith(("intent_head", "slot_head"))}
        missing, unexpected = model.load_state_dict(sd, strict=False)
        missing = [k for k in missing if not k.startswith(("intent_head", "slot_head", "mlm_"))]
        if missing or unexpected:
            raise ValueError(f"--init-encoder {args.init_encoder}: missing {missing}, "
                             f"unexpected {unexpected}")
        model.to(device)
        log(f"encoder from {args.init_encoder} (pretrained step {icfg.get('step')})")
    t_start = time.time()
    if args.mlm_steps > 0:
        pretrain_mlm(model, data, args, device, rng)

    aug = Augmenter(data, tax, args, rng)
    steps_per_epoch = len(make_batches(train, args.batch_size, random.Random(0)))
    total = steps_per_epoch * args.epochs
    if args.max_steps:
        total = min(total, args.max_steps)
    opt = make_optimizer(model, args.lr, args.weight_decay)
    # --time-budget may shorten the schedule after the first epoch; the result is then the same
    # as a run with --epochs set to the epochs that fitted (config.json: epochs_run).
    plan = {"total": total, "warm": int(total * args.warmup)}
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda st: lr_lambda(plan["warm"], plan["total"])(st))
    best, best_score, best_epoch, history = None, -1.0, -1, []
    ema = WeightEma(model, args.ema) if args.ema > 0 else None
    step = 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        t0, tot_loss = time.time(), 0.0
        batches = make_batches(train, args.batch_size, rng)
        for bi, idx in enumerate(batches):
            pairs = [aug(train[i]) for i in idx]
            n_real = len(pairs)
            if args.garble > 0:  # noise examples: no slots, intent pushed toward uniform
                pairs += [aug.garbled(train[i]) for i in idx if rng.random() < args.garble]
            ids, mask, tt, lab = pad_batch([p[0] for p in pairs], pad, device,
                                           [p[1] for p in pairs])
            gold = torch.tensor([train[i]["intent"] for i in idx], device=device)
            with torch.autocast(device.type, dtype=torch.bfloat16,
                                enabled=args.bf16 and device.type == "cuda"):
                il, sl = model(ids, mask, tt)
            il, sl = il.float(), sl.float()
            loss = F.cross_entropy(il[:n_real], gold, label_smoothing=args.intent_smoothing) + \
                args.slot_weight * F.cross_entropy(
                sl.reshape(-1, sl.size(-1)), lab.reshape(-1), ignore_index=IGNORE)
            if len(pairs) > n_real:
                loss = loss - 0.5 * F.log_softmax(il[n_real:], -1).mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if ema is not None:
                ema.update()
            tot_loss += loss.detach()  # no device sync per step; read at log time
            step += 1
            if args.log_every and step % args.log_every == 0:
                log(f"  step {step} loss {float(tot_loss) / (bi + 1):.4f} "
                    f"({time.time() - t0:.0f}s)")
            if step >= plan["total"]:
                break
        if epoch == 1 and args.time_budget:
            per_epoch = time.time() - t0
            left = args.time_budget - (time.time() - t_start)
            fit = max(1, 1 + int(left / (per_epoch * 1.15)))
            if fit < args.epochs:
                plan["total"] = min(plan["total"], fit * steps_per_epoch)
                plan["warm"] = int(plan["total"] * args.warmup)
                log(f"time budget: {fit} epochs of {args.epochs} fit ({per_epoch:.1f}s each)")
        if ema is not None:
            ema.swap()  # the average is what is scored and kept
        m = evaluate(model, dev, tax, pad, device, args.min_span_chars)
        score = (m["intent_accuracy"] + m["slot_f1"]) / 2
        tot_loss = float(tot_loss)
        history.append({"epoch": epoch, "loss": tot_loss / (bi + 1),
                        "dev_intent_accuracy": m["intent_accuracy"], "dev_slot_f1": m["slot_f1"]})
        log(f"epoch {epoch} loss {history[-1]['loss']:.4f} dev intent {m['intent_accuracy']:.4f} "
            f"slot F1 {m['slot_f1']:.4f} ({time.time() - t0:.0f}s)")
        if score > best_score:
            best_score, best_epoch = score, epoch
            best = copy.deepcopy({k: v.detach().cpu() for k, v in model.state_dict().items()})
            if args.save_every_best:  # a usable run folder even if the run is stopped early
                save_run(args.out, model, run_config(model, data, tax, args, argv, device,
                                                     best_epoch, len(history)),
                         {"dev": m, "history": history, "partial": True})
        if ema is not None:
            ema.swap()  # back to the live weights for the next epoch
        if step >= plan["total"]:
            break
    model.load_state_dict(best)
    dev_m = evaluate(model, dev, tax, pad, device, args.min_span_chars)
    test_m = evaluate(model, test, tax, pad, device, args.min_span_chars)
    log(f"best epoch {best_epoch}: dev intent {dev_m['intent_accuracy']:.4f} slot F1 "
        f"{dev_m['slot_f1']:.4f}; test intent {test_m['intent_accuracy']:.4f} slot F1 "
        f"{test_m['slot_f1']:.4f}; {time.time() - t_start:.0f}s")
    # The hand-written challenge set (other voices, never used for selection): reported only.
    challenge = data["splits"].get("challenge")
    chal_m = evaluate(model, challenge, tax, pad, device, args.min_span_chars) if challenge else None
    if chal_m:
        log(f"challenge ({len(challenge)} hand-written lines): intent "
            f"{chal_m['intent_accuracy']:.4f} slot F1 {chal_m['slot_f1']:.4f}")
    # Confidence: temperature scaling of the intent logits on dev; ECE before and after.
    calib = {}
    dev_logits = intent_logits(model, dev, pad, device)
    dev_gold = np.asarray([ex["intent"] for ex in dev])
    temp = fit_temperature(dev_logits, dev_gold)
    calib = {"temperature": temp,
             "handoff": handoff_threshold(softmax(dev_logits, temp), dev_gold)}
    for name, exs in (("dev", dev), ("test", test), ("challenge", challenge)):
        if not exs:
            continue
        lg = dev_logits if name == "dev" else intent_logits(model, exs, pad, device)
        g = np.asarray([ex["intent"] for ex in exs])
        calib[name] = {"ece": ece(softmax(lg), g), "ece_calibrated": ece(softmax(lg, temp), g),
                       "mean_confidence": float(softmax(lg).max(1).mean()),
                       "mean_confidence_calibrated": float(softmax(lg, temp).max(1).mean())}
    log(f"calibration: temperature {temp:.3f}, hand-off below {calib['handoff']['threshold']} "
        f"(dev rate {calib['handoff']['rate']:.3f}); " +
        "; ".join(f"{k} ECE {v['ece']:.4f} -> {v['ece_calibrated']:.4f}"
                  for k, v in calib.items() if isinstance(v, dict) and "ece" in v))
    cfg = run_config(model, data, tax, args, argv, device, best_epoch, len(history))
    cfg["calibration"] = {"temperature": temp, "handoff_threshold": calib["handoff"]["threshold"]}
    if args.init_encoder:
        cfg["pretrain"] = {k: icfg.get(k) for k in ("step", "seen_tokens")}
        cfg["pretrain"]["sources"] = (icfg.get("pretrain") or {}).get("sources")
    result = {"dev": dev_m, "test": test_m, "challenge": chal_m, "history": history,
              "calibration": calib,
              "train_seconds": round(time.time() - t_start, 1), "n_train": len(train),
              "n_dev": len(dev), "n_test": len(test), "params": n_params}
    save_run(args.out, model, cfg, result)
    log(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
