#!/usr/bin/env python3
"""Reference speeds for bench/tokenizer_bench.cc: transformers' BertTokenizer (slow, Python) and
BertTokenizerFast (Rust), one thread, on the same built-in texts, in MB of UTF-8 per second.

    ~/.cache/hotline/venv/bin/python bench/tokenizer_bench.py --vocab VOCAB [--seconds S]
"""
import argparse
import json
import os
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers import BertTokenizer, BertTokenizerFast  # noqa: E402

TEXTS = [
    "朝阳区建国路88号工地晚上十一点还在打桩，吵得人睡不着",
    "我要查一下我的社保缴费记录，身份证号是110105198806071234",
    "你好，我家住在海淀区中关村大街12号院3号楼，从昨天晚上开始停水了",
    "车牌京A12345的出租车拒载，司机态度很差，电话幺三八一二三四五六七八",
    "工单ＧＤ２０２６１１２８００１办得怎么样了？已经一个星期了",
    "300路公交车今天早上等了四十分钟都没来，能不能反映一下",
    "在华联超市办的预付卡要退费三千五百元，商家不给退",
    "嗯那个就是我们小区的电梯又坏了 Elevator stopped on 5F, please help",
    "喂你好",
    "鑫源物业公司不管事儿，楼道里垃圾堆了好几天了都没人清运！",
]


def measure(fn, seconds):
    nbytes = sum(len(t.encode()) for t in TEXTS)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for t in TEXTS:
            fn(t)
        n += 1
    el = time.perf_counter() - t0
    return {"mb_per_s": round(n * nbytes / el / 1e6, 3), "texts_per_s": round(n * len(TEXTS) / el)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    slow = BertTokenizer(a.vocab, do_lower_case=True)
    fast = BertTokenizerFast(a.vocab, do_lower_case=True)
    print(json.dumps({"slow": measure(lambda t: slow(t)["input_ids"], a.seconds),
                      "fast": measure(lambda t: fast(t)["input_ids"], a.seconds)}))


if __name__ == "__main__":
    main()
