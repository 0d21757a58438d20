#!/usr/bin/env python3
"""Validates hotline JSON Lines files against config/taxonomy/hotline.yaml.

    python3 training/data_gen/validate.py data/hotline/*.jsonl

Checks every line: valid JSON object; labelled files ({"text","intent","slots"}) have a known
intent, known slot types, 0 <= start < end <= len(text) in code points, text[start:end] == value,
no overlapping spans, spans that neither start nor end with whitespace, punctuation or the
particles 的/在/了/吗/呢/吧; no two time/address/organization… spans touching (one value is one span); a
district ends with 区/县/市/旗/州; an address neither starts with 住/到/从/去/于/往 nor ends with a
position word (那边, 附近, 门口…); every closed-class value (card/certificate/vaccine items,
calendar time expressions: autolabel.py) outside a span is an error, so that held-out, challenge
and train files label them one way; unlabelled files (calib.jsonl) hold {"text"} only. A file named
train.jsonl must have at least --min-train utterances for every intent. Exits 1 on any problem,
printing each (file:line: what was expected, what came).
"""
import argparse
import collections
import json
import os
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import autolabel  # noqa: E402
from taxonomy import DEFAULT_PATH, Taxonomy  # noqa: E402

PARTICLES = set("的在了吗呢吧")
# Words that legitimately end or start with a particle character (网吧 is a shop, 的士 a taxi).
EDGE_WORDS_END = ("网吧", "酒吧", "书吧", "水吧", "氧吧", "陶吧")
EDGE_WORDS_START = ("的士", "的哥", "在线")


# One value is one span: two touching spans of these types are one value cut in two (items and
# names may be listed without a separator: 身份证社保卡).
TOUCH_NEVER = ("time", "address", "district", "organization", "amount", "bus_line", "plate_number")
DISTRICT_ENDS = tuple("区县市旗州")
ADDRESS_BAD_START = tuple("住到从去于往")
ADDRESS_BAD_END = ("那边", "这边", "附近", "旁边", "对面", "那里", "这里", "里面", "门口", "一带", "楼下",
                   "楼上", "这块", "那块")


def _bad_edge_char(ch):
    return ch.isspace() or unicodedata.category(ch).startswith("P") or ch in PARTICLES


def check_example(obj, tax, labelled):
    """Returns a list of problem strings for one parsed line (empty when valid)."""
    errs = []
    if not isinstance(obj, dict):
        return [f"expected a JSON object, got {type(obj).__name__}"]
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        return [f"expected non-empty string 'text', got {text!r}"]
    if text != text.strip():
        errs.append("text starts or ends with whitespace")
    if not labelled:
        extra = set(obj) - {"text"}
        if extra:
            errs.append(f"unlabelled file: expected only 'text', got extra keys {sorted(extra)}")
        return errs
    extra = set(obj) - {"text", "intent", "slots"}
    if extra:
        errs.append(f"unexpected keys {sorted(extra)}")
    intent = obj.get("intent")
    if intent not in tax.intent_by_id:
        errs.append(f"unknown intent {intent!r}")
    slots = obj.get("slots")
    if not isinstance(slots, list):
        return errs + [f"expected 'slots' list, got {type(slots).__name__}"]
    spans = []
    for k, s in enumerate(slots):
        where = f"slot {k}"
        if not isinstance(s, dict) or set(s) != {"type", "start", "end", "value"}:
            errs.append(f"{where}: expected object with type/start/end/value, got {s!r}")
            continue
        st, en, val, typ = s["start"], s["end"], s["value"], s["type"]
        if typ not in tax.slot_set:
            errs.append(f"{where}: unknown slot type {typ!r}")
        if not (isinstance(st, int) and isinstance(en, int) and 0 <= st < en <= len(text)):
            errs.append(f"{where}: expected 0 <= start < end <= {len(text)}, got {st}..{en}")
            continue
        if text[st:en] != val:
            errs.append(f"{where}: text[{st}:{en}] is {text[st:en]!r}, value is {val!r}")
            continue
        if _bad_edge_char(val[0]) and not val.startswith(EDGE_WORDS_START):
            errs.append(f"{where}: {typ} span {val!r} starts with {val[0]!r}")
        if _bad_edge_char(val[-1]) and not val.endswith(EDGE_WORDS_END):
            errs.append(f"{where}: {typ} span {val!r} ends with {val[-1]!r}")
        if typ == "district" and not val.endswith(DISTRICT_ENDS):
            errs.append(f"{where}: district {val!r} does not end with one of {''.join(DISTRICT_ENDS)}")
        if typ == "address" and val.startswith(ADDRESS_BAD_START):
            errs.append(f"{where}: address {val!r} starts with the verb {val[0]!r}")
        if typ == "address" and val.endswith(ADDRESS_BAD_END):
            errs.append(f"{where}: address {val!r} ends with a position word")
        spans.append((st, en, k, typ))
    spans.sort()
    for (s1, e1, k1, t1), (s2, e2, k2, t2) in zip(spans, spans[1:]):
        if s2 < e1:
            errs.append(f"slots {k1} and {k2} overlap ({s1}..{e1} and {s2}..{e2})")
        elif s2 == e1 and t1 == t2 and t1 in TOUCH_NEVER:
            errs.append(f"slots {k1} and {k2} are both {t1} and touch at {e1}: expected one span "
                        f"{text[s1:e2]!r}")
    if not errs:
        products = intent in autolabel.PRODUCT_INTENTS
        for st, en, typ in autolabel.unlabelled(text, [(a, b, t) for a, b, _, t in spans], products):
            errs.append(f"{text[st:en]!r} at {st}..{en} is a {typ} (autolabel.py) but not labelled")
    return errs


def validate_file(path, tax, min_train):
    problems = []
    labelled = not os.path.basename(path).startswith("calib")
    counts = collections.Counter()
    lines = 0
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        return [f"{path}: cannot open ({e.strerror})"], counts, 0
    with f:
        for n, line in enumerate(f, 1):
            lines = n
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(f"{path}:{n}: invalid JSON ({e.msg} at column {e.colno})")
                continue
            for err in check_example(obj, tax, labelled):
                problems.append(f"{path}:{n}: {err}")
            if labelled and isinstance(obj, dict):
                counts[obj.get("intent")] += 1
    if os.path.basename(path) == "train.jsonl":
        for intent in tax.intent_ids:
            if counts[intent] < min_train:
                problems.append(f"{path}: intent {intent} has {counts[intent]} utterances, "
                                f"expected at least {min_train}")
    if lines == 0:
        problems.append(f"{path}: empty file, expected JSON Lines")
    return problems, counts, lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--taxonomy", default=DEFAULT_PATH)
    ap.add_argument("--min-train", type=int, default=150)
    ap.add_argument("--max-report", type=int, default=50)
    args = ap.parse_args(argv)
    tax = Taxonomy(args.taxonomy)
    all_problems = []
    for path in args.files:
        problems, counts, lines = validate_file(path, tax, args.min_train)
        what = f"{len(counts)} intents" if counts else "unlabelled"
        print(f"{path}: {lines} lines, {what}, "
              f"{str(len(problems)) + ' problems' if problems else 'ok'}")
        all_problems += problems
    for p in all_problems[:args.max_report]:
        print(p, file=sys.stderr)
    if len(all_problems) > args.max_report:
        print(f"... and {len(all_problems) - args.max_report} more", file=sys.stderr)
    return 1 if all_problems else 0


if __name__ == "__main__":
    sys.exit(main())
