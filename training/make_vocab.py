"""Build the character vocabulary (BERT vocab.txt form: one token a line, id = line number).

Order (deterministic for the same inputs):
  [PAD] [UNK] [CLS] [SEP] [MASK]                    ids 0..4
  ASCII punctuation, digits 0-9, letters a-z       (the tokenizer lower-cases)
  "##" forms of digits and letters                 so "gd2026" splits into g ##d ##2 ##0 ##2 ##6
  CJK punctuation and common symbols
  GB 2312 non-hanzi symbols (rows 1-8, no box drawing), after the tokenizer's normalisation
  the 6,763 GB 2312 hanzi in GB 2312 order
  characters of the given data/taxonomy files outside all of the above (by code point)
  "##" forms of every non-CJK, non-punctuation entry (word-internal pieces)

Usage: python3 training/make_vocab.py --out models/default/vocab.txt [--data FILE.jsonl ...]
"""
import argparse
import json
import os
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import SPECIALS, TAXONOMY, normalize_width  # noqa: E402

CJK_PUNCT = ("，。、；：？！“”‘’（）《》〈〉【】「」『』〔〕〖〗…—–·・～￥％＋＝"
             "〃々〆〇〒〓〝〞〟︰︱︳︴︵︶︷︸︹︺︻︼︽︾︿﹀﹁﹂﹃﹄﹏")
SYMBOLS = "°℃℉‰§№☆★○●◎◇◆□■△▲※→←↑↓〓×÷±≤≥≠≈∞√∑∏∈∩∪⊥∠⌒⊙≌∽①②③④⑤⑥⑦⑧⑨⑩€£¥¢"


def is_cjk(cp):
    # Exactly BERT's _is_chinese_char ranges: these are split into single-character words.
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def is_punct(ch):
    # Exactly BERT's _is_punctuation: split into single-character words.
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def tokenizer_form(ch):
    """What BertTokenizer(do_lower_case=True) makes of one character after width folding
    ('' when it drops it: whitespace, control, combining marks)."""
    s = normalize_width(ch).lower()
    s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
    out = []
    for c in s:
        cat = unicodedata.category(c)
        if c.isspace() or cat in ("Cc", "Cf", "Zs", "Zl", "Zp") or ord(c) in (0, 0xFFFD):
            continue
        out.append(c)
    return "".join(out)


def gb2312_rows(first, last):
    chars = []
    for hi in range(first, last + 1):
        for lo in range(0xA1, 0xFF):
            try:
                chars.append(bytes([hi, lo]).decode("gb2312"))
            except UnicodeDecodeError:
                pass
    return chars


def data_chars(paths):
    chars = set()
    for p in paths:
        with open(p, encoding="utf-8") as f:
            if p.endswith(".jsonl"):
                for line in f:
                    line = line.strip()
                    if line:
                        chars.update(json.loads(line).get("text", ""))
            else:
                chars.update(f.read())
    return chars


def build_vocab(extra_files=()):
    tokens = list(SPECIALS)
    seen = set(tokens)

    def add(tok):
        if tok and tok not in seen:
            seen.add(tok)
            tokens.append(tok)

    def add_chars(chars):
        for ch in chars:
            for c in tokenizer_form(ch):  # NFD can split one symbol into several
                add(c)

    add_chars(chr(c) for c in range(33, 127) if is_punct(chr(c)))
    add_chars("0123456789abcdefghijklmnopqrstuvwxyz")
    for c in "0123456789abcdefghijklmnopqrstuvwxyz":
        add("##" + c)
    add_chars(CJK_PUNCT)
    add_chars(SYMBOLS)
    add_chars(gb2312_rows(0xA1, 0xA8))  # symbols, Greek, Cyrillic, kana, pinyin
    hanzi = gb2312_rows(0xB0, 0xF7)
    assert len(hanzi) == 6763, len(hanzi)
    add_chars(hanzi)
    add_chars(sorted(data_chars(extra_files)))
    # Word-internal forms: BasicTokenizer glues runs of non-CJK, non-punctuation characters into
    # one word, and WordPiece then needs "##c" for every character after the first.
    for tok in list(tokens[len(SPECIALS):]):
        if not tok.startswith("##") and len(tok) == 1 and not is_cjk(ord(tok)) and not is_punct(tok):
            add("##" + tok)
    return tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True, help="vocab.txt to write")
    ap.add_argument("--data", nargs="*", default=[],
                    help="JSONL (text field) or plain files whose characters must be covered")
    a = ap.parse_args()
    files = [TAXONOMY] + [p for p in a.data]
    tokens = build_vocab(files)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    print(f"wrote {a.out}: {len(tokens)} tokens")


if __name__ == "__main__":
    main()
