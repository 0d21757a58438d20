#!/usr/bin/env python3
"""Builds data/hotline/challenge.jsonl from the hand-written data/hotline/challenge.src.tsv.

    python3 training/data_gen/challenge.py [--src data/hotline/challenge.src.tsv] [--out ...]

The challenge set is written freehand, in voices unlike the templates (generate.py never reads
it); it is for evaluation only (train.py and export.py report it beside test). Source format, one
utterance a line: `intent<TAB>text`, with spans marked `[value](slot_type)`; `[text](-)` marks
words left unlabelled on purpose (a city before a district). Lines starting with # are comments.
Offsets are computed here, so they are exact by construction; validate.py checks the labels.
"""
import argparse
import json
import os
import re
import sys

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_SPAN_RE = re.compile(r"\[([^\[\]]+)\]\(([a-z_]+|-)\)")


def parse_line(line, where):
    """`intent<TAB>marked text` -> {"text", "intent", "slots"}; ValueError naming `where`."""
    if "\t" not in line:
        raise ValueError(f"{where}: expected intent<TAB>text, got {line!r}")
    intent, marked = line.split("\t", 1)
    text, slots, pos = [], [], 0
    n = 0
    for m in _SPAN_RE.finditer(marked):
        text.append(marked[pos:m.start()])
        n += len(marked[pos:m.start()])
        value, typ = m.group(1), m.group(2)
        if typ != "-":
            slots.append({"type": typ, "start": n, "end": n + len(value), "value": value})
        text.append(value)
        n += len(value)
        pos = m.end()
    text.append(marked[pos:])
    out = "".join(text)
    if re.search(r"\[|\]\(", out):
        raise ValueError(f"{where}: unbalanced span markup in {marked!r}")
    return {"text": out, "intent": intent.strip(), "slots": slots}


def build(src):
    rows = []
    with open(src, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            rows.append(parse_line(line, f"{src}:{n}"))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--src", default=os.path.join(REPO_ROOT, "data", "hotline", "challenge.src.tsv"))
    ap.add_argument("--out", default=os.path.join(REPO_ROOT, "data", "hotline", "challenge.jsonl"))
    args = ap.parse_args(argv)
    try:
        rows = build(args.src)
    except ValueError as e:
        raise SystemExit(str(e))
    with open(args.out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}: {len(rows)} utterances")
    return 0


if __name__ == "__main__":
    sys.exit(main())
