"""Corpus stage: real Chinese text -> masked, tokenised, word-segmented shards for pretraining,
the vocabulary, and the real-order (Haikou 12345) splits.

Reads a corpus folder laid out as
  pretrain/*/part-*.txt.gz                      one text per line
  hotline_haikou_12345/orders.jsonl.gz          real work orders (text, label, cat1..cat4, order_id)
  slu/cais/test.jsonl.gz                        (optional) its texts are kept out of pretraining
given by --corpus or $HOTLINE_CORPUS. Without one, it says so and exits 0, so `training/` runs on a
machine that has only the project's own data.

Writes to --out (default build-train/corpus):
  vocab.txt                  make_vocab.py's order, plus every character the corpus uses at least
                             --min-count times and every character of the orders
  pretrain-<source>.npz      `ids` uint16 token stream ([SEP] between texts) with bit 15 set on
                             tokens that start a jieba word (whole-word masking), `starts` int64
                             offsets of the texts in the stream
  haikou/{train,dev,test}.jsonl   orders split by order number: the latest --test-frac are the test
                             set, the --dev-frac before them dev; texts PII-masked
  report.json                counts, [UNK] rate on the orders, masking counts

Personal data is masked before anything is written: mobile and landline numbers, ID numbers and
plates the source masking missed, and person names that jieba tags (orders only), which keep
their surname ("王某").
"""
import argparse
import glob
import gzip
import json
import multiprocessing as mp
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPO, normalize_width, read_jsonl  # noqa: E402
import make_vocab  # noqa: E402

WORD_START = 0x8000

_ID = re.compile(r"(?<![0-9])[1-9]\d{5}(?:19|20)\d{2}(?:0[1-9]|1[0-2])\d{2}\d{3}[\dXx](?![0-9])")
_MOBILE = re.compile(r"(?<![0-9])1[3-9]\d{9}(?![0-9])")
_LANDLINE = re.compile(r"(?<![0-9])0\d{2,3}-?\d{7,8}(?![0-9])")
_PLATE = re.compile(r"[京津沪渝冀豫云辽黑湘皖鲁新苏浙赣鄂桂甘晋蒙陕吉闽贵粤青藏川宁琼][A-Za-z]"
                    r"[·\s]?[A-Za-z0-9]{5,6}(?![A-Za-z0-9])")


def mask_pii(text, counts=None):
    """Masks ID numbers, mobile and landline numbers and plates in `text`."""
    for pat, rep, key in ((_ID, "[身份证号]", "id"), (_MOBILE, "[手机号]", "mobile"),
                          (_LANDLINE, "[电话]", "landline"), (_PLATE, "[车牌号]", "plate")):
        text, n = pat.subn(rep, text)
        if counts is not None:
            counts[key] = counts.get(key, 0) + n
    return text


_SURNAMES = set("王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于"
                "蒋蔡余杜叶程苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹"
                "薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤符吉云")


def mask_names(text):
    """Person names jieba tags (nr, 2-3 characters, a common surname first) -> surname + 某."""
    import jieba.posseg as pseg
    out = []
    for w, flag in pseg.cut(text, HMM=True):
        if flag == "nr" and 2 <= len(w) <= 3 and w[0] in _SURNAMES:
            out.append(w[0] + "某" * (len(w) - 1))
        else:
            out.append(w)
    return "".join(out)


def _mask_order(row):
    return mask_names(mask_pii(row["text"]))


def read_lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                yield line


class Segmenter:
    """Tokenises text with the vocabulary (BertTokenizerFast, the same ids as the slow reference
    tokenizer on these vocabularies) and marks tokens that start a jieba word."""

    def __init__(self, vocab_path):
        from transformers import BertTokenizerFast
        self.tok = BertTokenizerFast(vocab_path, do_lower_case=True)
        self.sep = self.tok.sep_token_id

    def encode_many(self, texts):
        import jieba
        jieba.setLogLevel(60)
        norm = [normalize_width(t) for t in texts]
        enc = self.tok(norm, add_special_tokens=False, return_offsets_mapping=True)
        out = []
        for text, ids, offs in zip(norm, enc["input_ids"], enc["offset_mapping"]):
            starts, pos = set(), 0
            for w in jieba.cut(text, HMM=False):
                starts.add(pos)
                pos += len(w)
            arr = np.asarray(ids, dtype=np.uint16)
            flags = np.fromiter((o[0] in starts for o in offs), dtype=bool, count=len(offs))
            arr[flags] |= WORD_START
            out.append(arr)
        return out


_SEG = None


def _init_worker(vocab_path):
    global _SEG
    _SEG = Segmenter(vocab_path)


def _encode_chunk(texts):
    return _SEG.encode_many(texts)


def encode_stream(texts, vocab_path, procs):
    """Texts -> (uint16 stream with [SEP] after each text, int64 text starts)."""
    chunks = [texts[i:i + 2000] for i in range(0, len(texts), 2000)]
    with mp.Pool(procs, initializer=_init_worker, initargs=(vocab_path,)) as pool:
        parts = pool.map(_encode_chunk, chunks)
    seg = Segmenter(vocab_path)
    pieces, starts, pos = [], [], 0
    for part in parts:
        for arr in part:
            if len(arr) == 0:
                continue
            starts.append(pos)
            pieces.append(arr)
            pieces.append(np.asarray([seg.sep], dtype=np.uint16))
            pos += len(arr) + 1
    return np.concatenate(pieces), np.asarray(starts, dtype=np.int64)


def split_orders(rows, dev_frac, test_frac):
    rows = sorted(rows, key=lambda r: r["order_id"])
    n = len(rows)
    n_test = int(round(n * test_frac))
    n_dev = int(round(n * dev_frac))
    return rows[:n - n_test - n_dev], rows[n - n_test - n_dev:n - n_test], rows[n - n_test:]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--corpus", default=os.environ.get("HOTLINE_CORPUS"),
                    help="corpus folder (default: $HOTLINE_CORPUS)")
    ap.add_argument("--out", default=os.path.join(REPO, "build-train", "corpus"))
    ap.add_argument("--own-data", default=os.path.join(REPO, "data", "hotline"),
                    help="the project's call text (train.jsonl, calib.jsonl) joins pretraining")
    ap.add_argument("--min-count", type=int, default=2)
    ap.add_argument("--news-chars", type=int, default=6_000_000,
                    help="keep about this many characters of the news source (formal register)")
    ap.add_argument("--dev-frac", type=float, default=0.08)
    ap.add_argument("--test-frac", type=float, default=0.15)
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args(argv)
    if not a.corpus or not os.path.isdir(a.corpus):
        print(f"corpus stage skipped: no corpus folder (--corpus or $HOTLINE_CORPUS; got "
              f"{a.corpus!r}); training uses the project's own data only")
        return 0
    os.makedirs(os.path.join(a.out, "haikou"), exist_ok=True)
    rng = np.random.default_rng(a.seed)
    report = {"masked": {}}

    # Real orders: masked, split by order number (the latest are the held-out test).
    orders = list(map(json.loads, gzip.open(os.path.join(a.corpus, "hotline_haikou_12345",
                                                         "orders.jsonl.gz"), "rt", encoding="utf-8")))
    for r in orders:
        r["text"] = mask_pii(r["text"], report["masked"])
    with mp.Pool(a.procs) as pool:
        masked = pool.map(_mask_order, orders, chunksize=200)
    names = 0
    for r, t in zip(orders, masked):
        names += t.count("某") - r["text"].count("某")
        r["text"] = t
    report["masked"]["names"] = names
    train, dev, test = split_orders(orders, a.dev_frac, a.test_frac)
    keep = ("text", "label", "cat1", "cat2", "cat3", "cat4", "order_id")
    for name, rows in (("train", train), ("dev", dev), ("test", test)):
        with open(os.path.join(a.out, "haikou", name + ".jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({k: r[k] for k in keep}, ensure_ascii=False) + "\n")
    report["haikou"] = {"train": len(train), "dev": len(dev), "test": len(test),
                        "test_first_order": test[0]["order_id"]}

    # Pretraining texts per source.
    held = set()
    cais_test = os.path.join(a.corpus, "slu", "cais", "test.jsonl.gz")
    if os.path.exists(cais_test):
        held = {json.loads(l)["text"].strip() for l in gzip.open(cais_test, "rt", encoding="utf-8")}
    sources = {}
    for path in sorted(glob.glob(os.path.join(a.corpus, "pretrain", "*", "part-*.txt.gz"))):
        name = os.path.basename(os.path.dirname(path))
        sources.setdefault(name, []).extend(mask_pii(t) for t in read_lines(path) if t not in held)
    if "xinwenlianbo_news" in sources:
        lines = sources["xinwenlianbo_news"]
        total = sum(map(len, lines))
        if total > a.news_chars:
            keep_p = a.news_chars / total
            sources["xinwenlianbo_news"] = [t for t in lines if rng.random() < keep_p]
    sources["haikou_orders"] = [r["text"] for r in train + dev]
    own = []
    for split in ("train", "calib"):
        p = os.path.join(a.own_data, split + ".jsonl")
        if os.path.exists(p):
            own += [r["text"] for r in read_jsonl(p)]
    sources["own_calls"] = own

    # Vocabulary: the project's characters plus what real text uses.
    from collections import Counter
    counts = Counter()
    for lines in sources.values():
        for t in lines:
            counts.update(t)
    order_chars = set("".join(r["text"] for r in orders))
    chars_file = os.path.join(a.out, "chars.txt")
    with open(chars_file, "w", encoding="utf-8") as f:
        f.write("".join(sorted({c for c, n in counts.items() if n >= a.min_count} | order_chars)))
    own_files = [p for p in glob.glob(os.path.join(a.own_data, "*.jsonl"))]
    tokens = make_vocab.build_vocab([make_vocab.TAXONOMY] + own_files + [chars_file])
    vocab_path = os.path.join(a.out, "vocab.txt")
    with open(vocab_path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    report["vocab_size"] = len(tokens)
    if len(tokens) >= WORD_START:
        raise SystemExit(f"vocabulary of {len(tokens)} tokens does not fit the 15-bit stream")

    # [UNK] rate on the orders (all of them, the held-out ones included: coverage, not training).
    seg = Segmenter(vocab_path)
    enc = seg.tok([normalize_width(r["text"]) for r in orders], add_special_tokens=False)
    n_tok = sum(len(x) for x in enc["input_ids"])
    n_unk = sum(x.count(seg.tok.unk_token_id) for x in enc["input_ids"])
    report["haikou_unk_rate"] = n_unk / max(1, n_tok)

    report["sources"] = {}
    for name, lines in sources.items():
        ids, starts = encode_stream(lines, vocab_path, a.procs)
        np.savez_compressed(os.path.join(a.out, f"pretrain-{name}.npz"), ids=ids, starts=starts)
        report["sources"][name] = {"texts": len(starts), "tokens": int(len(ids)),
                                   "chars": sum(map(len, lines))}
        print(f"{name}: {len(starts)} texts, {len(ids)} tokens", flush=True)
    with open(os.path.join(a.out, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, ensure_ascii=False, indent=1)
    print(json.dumps(report, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
