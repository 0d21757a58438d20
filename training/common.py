"""Shared pieces of the training pipeline: taxonomy, text normalisation, tokenisation, BIO tags,
span decoding and metrics.

Contracts the C++ side mirrors (src/text, src/nlu):
- normalize_width: full-width ASCII forms U+FF01..U+FF5E become U+0021..U+007E and the ideographic
  space U+3000 becomes U+0020. The mapping is one code point to one code point, so code-point
  offsets into the normalised text are offsets into the original text.
- Tokens are BertTokenizer(vocab, do_lower_case=True) over the width-normalised text, with
  [CLS] ... [SEP], at most max_length tokens (the text is cut, [SEP] kept).
- Slot tags: "O", then "B-<slot>", "I-<slot>" for each slot in hotline.yaml order.
- Decoding: a span starts at a B-x token, or at an I-x token that does not continue a span of
  type x; it grows over following I-x tokens. Its code-point extent runs from the first token's
  start to the last token's end, cut to begin after the previous kept span, then trimmed of
  whitespace, punctuation and control characters at both ends (src/nlu/bio.cc ToCharSpans).
  Spans shorter than MIN_SPAN_CHARS code points are dropped: no value of any slot type is one
  character long (validate.py never sees one in the data), and the single-character spans a
  model emits inside running text (万 in 千恩万谢, 证, 厂) were half of the shipped model's false
  positives. [CLS]/[SEP]/padding carry no tags.
"""
import gzip
import json
import os
import unicodedata

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAXONOMY = os.path.join(REPO, "config", "taxonomy", "hotline.yaml")
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
IGNORE = -100  # label for positions the loss skips
MIN_SPAN_CHARS = 2  # decoded spans shorter than this (code points) are dropped; bio.cc agrees


class Taxonomy:
    def __init__(self, path=TAXONOMY):
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
        self.path = path
        self.intents = [i["id"] for i in doc["intents"]]
        self.slots = list(doc["slots"].keys())
        self.tags = ["O"]
        for s in self.slots:
            self.tags += ["B-" + s, "I-" + s]
        self.intent_index = {k: i for i, k in enumerate(self.intents)}
        self.tag_index = {k: i for i, k in enumerate(self.tags)}
        self.doc = doc


def normalize_width(text):
    """Full-width ASCII to ASCII, ideographic space to space; keeps code-point offsets."""
    out = []
    for ch in text:
        c = ord(ch)
        if 0xFF01 <= c <= 0xFF5E:
            out.append(chr(c - 0xFEE0))
        elif c == 0x3000:
            out.append(" ")
        else:
            out.append(ch)
    return "".join(out)


def read_jsonl(path):
    """One JSON object per line; a path ending in .gz is read through gzip."""
    rows = []
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: expected a JSON object per line: {e}") from None
    return rows


class Encoder:
    """Text (+ gold spans) -> token ids, code-point offsets, BIO tag ids.

    Ids come from transformers' (slow) BertTokenizer, the reference the C++ tokenizer matches;
    offsets come from the fast tokenizer built from the same vocab, and every encoding checks that
    both agree on the ids, so a disagreement fails loudly instead of misaligning tags.
    """

    def __init__(self, vocab_path, taxonomy, max_length=128):
        from transformers import BertTokenizer, BertTokenizerFast
        self.slow = BertTokenizer(vocab_path, do_lower_case=True)
        self.fast = BertTokenizerFast(vocab_path, do_lower_case=True)
        self.tax = taxonomy
        self.max_length = max_length
        self.cls_id = self.slow.cls_token_id
        self.sep_id = self.slow.sep_token_id
        self.pad_id = self.slow.pad_token_id
        self.unk_id = self.slow.unk_token_id
        self.mask_id = self.slow.mask_token_id
        self.vocab_size = len(self.slow.vocab)

    def tokenize(self, text):
        """Returns (ids with [CLS]/[SEP], offsets [(start, end)] per id, (0, 0) for specials)."""
        norm = normalize_width(text)
        ids = self.slow.convert_tokens_to_ids(self.slow.tokenize(norm))
        enc = self.fast(norm, add_special_tokens=False, return_offsets_mapping=True)
        if list(enc["input_ids"]) != list(ids):
            raise ValueError(f"slow and fast BertTokenizer disagree on {text!r}: {ids} vs "
                             f"{enc['input_ids']}")
        offs = [tuple(o) for o in enc["offset_mapping"]]
        keep = self.max_length - 2
        ids, offs = ids[:keep], offs[:keep]
        return [self.cls_id] + ids + [self.sep_id], [(0, 0)] + offs + [(0, 0)]

    def encode(self, row):
        """One dataset row -> dict(ids, offsets, tags, intent, spans, text)."""
        text = row["text"]
        ids, offs = self.tokenize(text)
        # "slots": null marks a text whose spans nobody labelled (real orders taken in for their
        # intent): its tokens are ignored by the slot loss rather than taught as O.
        unlabelled = "slots" in row and row["slots"] is None
        tags = [IGNORE] + [IGNORE if unlabelled else 0] * (len(ids) - 2) + [IGNORE]
        spans = []
        for s in row.get("slots") or []:
            if s["type"] not in self.tax.slots:
                raise ValueError(f"unknown slot type {s['type']!r} in {text!r}")
            spans.append((s["type"], s["start"], s["end"]))
            first = True
            for t in range(1, len(ids) - 1):
                a, b = offs[t]
                if a >= s["start"] and b <= s["end"] and b > a:
                    tags[t] = self.tax.tag_index[("B-" if first else "I-") + s["type"]]
                    first = False
        intent = row.get("intent")
        if intent is not None and intent not in self.tax.intent_index:
            raise ValueError(f"unknown intent {intent!r} in {text!r}")
        return {"ids": ids, "offsets": offs, "tags": tags,
                "intent": self.tax.intent_index[intent] if intent is not None else IGNORE,
                "spans": spans, "text": text}


def _trimmable(ch):
    """Whitespace, punctuation or control, as src/text/unicode.cc Classify (BERT's classes):
    every non-alphanumeric ASCII character; elsewhere categories P*, Z*, C*."""
    if ord(ch) < 128:
        return not ch.isalnum()
    cat = unicodedata.category(ch)
    return cat[0] in "PZC"


def decode_spans(tag_ids, offsets, tags, text=None, min_chars=MIN_SPAN_CHARS):
    """Token tag ids (aligned with offsets; specials skipped) -> [(type, start, end)].

    text: the utterance; when given, spans are trimmed of whitespace/punctuation/control at
    both ends as the C++ pipeline does. Spans shorter than min_chars are dropped (the hotline
    default MIN_SPAN_CHARS; other data sets such as CAIS have one-character values)."""
    raw = []
    cur = None
    for t, (a, b) in zip(tag_ids, offsets):
        if b <= a:  # [CLS], [SEP], padding
            if cur:
                raw.append(tuple(cur))
            cur = None
            continue
        tag = tags[t]
        if tag == "O":
            if cur:
                raw.append(tuple(cur))
            cur = None
        elif tag.startswith("I-") and cur and cur[0] == tag[2:]:
            cur[2] = max(cur[2], b)
        else:
            if cur:
                raw.append(tuple(cur))
            cur = [tag[2:], a, b]
    if cur:
        raw.append(tuple(cur))
    spans, prev_end = [], 0
    for typ, a, b in raw:
        a = max(a, prev_end)
        if text is not None:
            b = min(b, len(text))
            while a < b and _trimmable(text[a]):
                a += 1
            while b > a and _trimmable(text[b - 1]):
                b -= 1
        if b - a < min_chars:
            continue
        spans.append((typ, a, b))
        prev_end = b
    return spans


def metrics(intent_gold, intent_pred, spans_gold, spans_pred, intents):
    """Intent accuracy, slot P/R/F1 (exact type and span), per-intent table."""
    n = len(intent_gold)
    correct = sum(int(g == p) for g, p in zip(intent_gold, intent_pred))
    tp = fp = fn = 0
    for g, p in zip(spans_gold, spans_pred):
        gs, ps = set(g), set(p)
        tp += len(gs & ps)
        fp += len(ps - gs)
        fn += len(gs - ps)
    prec = tp / (tp + fp) if tp + fp else 1.0
    rec = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    per = {}
    for k, name in enumerate(intents):
        support = sum(1 for g in intent_gold if g == k)
        predicted = sum(1 for p in intent_pred if p == k)
        hit = sum(1 for g, p in zip(intent_gold, intent_pred) if g == k and p == k)
        p_ = hit / predicted if predicted else 0.0
        r_ = hit / support if support else 0.0
        per[name] = {"n": support, "precision": p_, "recall": r_,
                     "f1": 2 * p_ * r_ / (p_ + r_) if p_ + r_ else 0.0}
    return {"n": n, "intent_accuracy": correct / n if n else 0.0, "slot_precision": prec,
            "slot_recall": rec, "slot_f1": f1, "per_intent": per}
