"""Training pipeline tests: vocabulary, tokenisation/tag alignment, span decoding, metrics,
augmentation, and a smoke run (tiny model, a few steps, export, ONNX Runtime parity).

Run: python -m pytest -q training/tests/test_training.py   (about a minute on 2 cores)
"""
import json
import os
import random
import sys
import unicodedata

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import common  # noqa: E402
import export  # noqa: E402
import make_vocab  # noqa: E402
import train  # noqa: E402

LINES = [
    ("朝阳区建国路88号工地晚上十一点还在打桩", "construction_noise",
     [("district", "朝阳区"), ("address", "建国路88号"), ("time", "晚上十一点")]),
    ("嗯那个车牌京A12345的司机绕路多收了我五十块钱", "taxi_complaint",
     [("plate_number", "京A12345"), ("amount", "五十块钱")]),
    ("我的工单ＧＤ２０２６１１２８００１怎么还没人处理", "order_urge", [("order_id", "ＧＤ２０２６１１２８００１")]),
    ("你好 我叫张建国 电话13812345678", "provide_info",
     [("person_name", "张建国"), ("phone", "13812345678")]),
    ("鑫源物业公司三个月不给我们发工资了", "wage_arrears", [("organization", "鑫源物业公司")]),
    ("300路公交车老是不停站", "bus_service", [("bus_line", "300路")]),
    ("好的谢谢再见", "goodbye", []),
    ("身份证号110105198806071234X社保断缴了", "social_insurance_payment",
     [("id_number", "110105198806071234X")]),
]


def rows():
    out = []
    for text, intent, slots in LINES:
        spans, pos = [], 0
        for typ, val in slots:
            s = text.index(val, pos)
            spans.append({"type": typ, "start": s, "end": s + len(val), "value": val})
            pos = s + len(val)
        out.append({"text": text, "intent": intent, "slots": spans})
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("train")
    data = d / "data"
    data.mkdir()
    r = rows()
    for split in ("train", "dev", "test"):
        with open(data / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for row in r:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(data / "challenge.jsonl", "w", encoding="utf-8") as f:  # reported, never trained on
        for row in r[:3]:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(data / "calib.jsonl", "w", encoding="utf-8") as f:
        for row in r:
            f.write(json.dumps({"text": row["text"] + "啊"}, ensure_ascii=False) + "\n")
    vocab = d / "vocab.txt"
    tokens = make_vocab.build_vocab([common.TAXONOMY, str(data / "train.jsonl")])
    vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def tax():
    return common.Taxonomy()


@pytest.fixture(scope="module")
def encoder(workdir, tax):
    return common.Encoder(str(workdir / "vocab.txt"), tax, 128)


def test_taxonomy_tags(tax):
    assert len(tax.intents) == 125 and len(tax.slots) == 12 and len(tax.tags) == 25
    cats = tax.doc["categories"]
    assert all(i["category"] in cats for i in tax.doc["intents"])
    assert set(cats) == {i["category"] for i in tax.doc["intents"]}  # every category is used
    assert tax.tags[:3] == ["O", "B-person_name", "I-person_name"]
    assert tax.tags[-1] == "I-item"


def test_vocab_covers_gb2312_and_is_deterministic(workdir):
    tokens = (workdir / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(tokens) == len(set(tokens))
    vocab = set(tokens)
    hanzi = [bytes([hi, lo]).decode("gb2312", errors="ignore")
             for hi in range(0xB0, 0xF8) for lo in range(0xA1, 0xFF)]
    hanzi = [h for h in hanzi if h]
    assert len(hanzi) == 6763 and all(h in vocab for h in hanzi)
    for c in "0123456789abcdefghijklmnopqrstuvwxyz":
        assert c in vocab and "##" + c in vocab
    for c in "、。《》【】「」“”‘’…—·,.?!:;()":  # full-width ，？！ fold to ASCII
        assert c in vocab
    assert not any(c in vocab for c in "ABCＡ１")  # upper case and full width are folded away
    again = make_vocab.build_vocab([common.TAXONOMY, str(workdir / "data" / "train.jsonl")])
    assert again == tokens


def test_normalize_width_matches_nfkc_on_fullwidth_ascii():
    full = "".join(chr(c) for c in range(0xFF01, 0xFF5F)) + "\u3000"
    assert common.normalize_width(full) == unicodedata.normalize("NFKC", full)
    assert common.normalize_width("中文、。《》") == "中文、。《》"  # CJK punctuation is kept


def test_tokens_match_bert_tokenizer_and_tags_round_trip(encoder, tax, workdir):
    from transformers import BertTokenizer
    ref = BertTokenizer(str(workdir / "vocab.txt"), do_lower_case=True)
    for row in rows():
        ex = encoder.encode(row)
        want = ref(common.normalize_width(row["text"]))["input_ids"]
        assert ex["ids"] == want
        assert encoder.unk_id not in ex["ids"]
        # Every token's offsets cover the characters it came from.
        for tid, (a, b) in zip(ex["ids"][1:-1], ex["offsets"][1:-1]):
            tok = ref.convert_ids_to_tokens(tid).replace("##", "")
            assert common.normalize_width(row["text"][a:b]).lower() == tok
        tags = [t if t >= 0 else 0 for t in ex["tags"]]
        got = common.decode_spans(tags, ex["offsets"], tax.tags)
        assert got == [(s["type"], s["start"], s["end"]) for s in row["slots"]]


def test_truncation_keeps_sep(encoder):
    enc = common.Encoder.__new__(common.Encoder)
    enc.__dict__.update(encoder.__dict__)
    enc.max_length = 6
    ids, offs = enc.tokenize("一二三四五六七八九十")
    assert len(ids) == 6 and ids[0] == enc.cls_id and ids[-1] == enc.sep_id
    assert offs[1:-1] == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_decode_spans_by_hand(tax):
    ti = tax.tag_index
    offs = [(0, 0), (0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (0, 0)]
    tags = [0, ti["B-district"], ti["I-district"], ti["I-address"], ti["I-address"], 0,
            ti["I-time"], ti["I-time"], 0]
    # An I- without its B- starts a span (district→address switch, time after O).
    assert common.decode_spans(tags, offs, tax.tags) == [
        ("district", 0, 2), ("address", 2, 4), ("time", 5, 7)]
    tags = [0, ti["B-phone"], ti["I-phone"], ti["B-phone"], ti["I-phone"], 0, 0, 0,
            ti["I-phone"]]  # [SEP] ends spans
    assert common.decode_spans(tags, offs, tax.tags) == [("phone", 0, 2), ("phone", 2, 4)]


def test_decode_spans_drops_single_characters(tax):
    # 千恩万谢 with 万 tagged as a name: no slot value is one character long (MIN_SPAN_CHARS).
    ti = tax.tag_index
    offs = [(0, 0), (0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (0, 0)]
    tags = [0, 0, 0, ti["B-person_name"], 0, ti["B-item"], ti["I-item"], 0]
    assert common.MIN_SPAN_CHARS == 2
    assert common.decode_spans(tags, offs, tax.tags) == [("item", 4, 6)]
    tags = [0, ti["I-time"], ti["B-time"], ti["I-time"], 0, ti["B-item"], 0, 0]
    assert common.decode_spans(tags, offs, tax.tags) == [("time", 1, 3)]


def test_decode_spans_trims_like_the_cpp_pipeline(tax):
    # Text "，朝阳区，" with the commas tagged: trimmed to 朝阳区 (bio.cc ToCharSpans); a span that
    # is only punctuation plus one character is then too short and dropped.
    ti = tax.tag_index
    text = "，朝阳区，好！"
    offs = [(0, 0)] + [(i, i + 1) for i in range(len(text))] + [(0, 0)]
    tags = [0, ti["B-district"], ti["I-district"], ti["I-district"], ti["I-district"],
            ti["I-district"], ti["B-time"], ti["I-time"], 0]
    assert common.decode_spans(tags, offs, tax.tags, text) == [("district", 1, 4)]
    assert common.decode_spans(tags, offs, tax.tags) == [("district", 0, 5), ("time", 5, 7)]
    # Tokens that share characters (pieces of one decomposed character): cut to start after the
    # previous span, so spans never overlap.
    offs = [(0, 0), (0, 2), (1, 3), (2, 4), (0, 0)]
    tags = [0, ti["B-item"], ti["B-time"], ti["I-time"], 0]
    assert common.decode_spans(tags, offs, tax.tags, "abcd") == [("item", 0, 2), ("time", 2, 4)]


def test_metrics_by_hand():
    m = common.metrics([0, 1, 1, 2], [0, 1, 2, 2],
                       [[("a", 0, 2)], [("b", 1, 3)], [], [("c", 0, 1)]],
                       [[("a", 0, 2)], [("b", 1, 4)], [("d", 0, 1)], [("c", 0, 1)]],
                       ["x", "y", "z"])
    assert m["intent_accuracy"] == 0.75
    assert m["slot_precision"] == 0.5 and m["slot_recall"] == pytest.approx(2 / 3)
    assert m["slot_f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert m["per_intent"]["y"] == {"n": 2, "precision": 1.0, "recall": 0.5,
                                    "f1": pytest.approx(2 / 3)}
    assert m["per_intent"]["z"]["precision"] == 0.5


def test_augmentation_keeps_bio_well_formed(workdir, tax):
    class A:  # argparse-like
        aug_swap, aug_drop, aug_filler = 1.0, 1.0, 1.0
    data = train.encode_splits(str(workdir / "data"), str(workdir / "vocab.txt"), tax, 128)
    aug = train.Augmenter(data, tax, A, random.Random(3))
    pool = {k: [tuple(v) for v in vs] for k, vs in aug.pool.items()}
    changed = 0
    for _ in range(20):
        for ex in data["splits"]["train"]:
            ids, tags = aug(ex)
            assert len(ids) == len(tags) and ids[0] == ex["ids"][0] and ids[-1] == ex["ids"][-1]
            changed += ids != ex["ids"]
            pieces = train.span_pieces(ids, tags, tax)
            # Same slot types in the same order, each value one of the training values of the
            # same intent (an item such as 身份证 vs 社保卡 decides the intent).
            assert [p[2] for p in pieces] == [s[0] for s in ex["spans"]]
            for s, e, slot in pieces:
                assert tuple(ids[s:e]) in pool[(ex["intent"], slot)]
                assert tax.tags[tags[s]] == "B-" + slot
    assert changed > 0


def augmented_spans(aug, data, tax, reps):
    """Runs `aug` over the training split `reps` times and checks what every value-replacing
    augmentation keeps: the same slot types in the same order, well-formed B-/I- tags, and the
    text between the spans unchanged. Yields (old value ids, new value ids, slot) per span."""
    for _ in range(reps):
        for ex in data["splits"]["train"]:
            ids, tags = aug(ex)
            old = train.span_pieces(ex["ids"], ex["tags"], tax)
            new = train.span_pieces(ids, tags, tax)
            assert [p[2] for p in new] == [p[2] for p in old]
            bounds_old = [0] + [b for s, e, _ in old for b in (s, e)] + [len(ex["ids"])]
            bounds_new = [0] + [b for s, e, _ in new for b in (s, e)] + [len(ids)]
            for k in range(0, len(bounds_old), 2):
                assert ex["ids"][bounds_old[k]:bounds_old[k + 1]] == ids[bounds_new[k]:bounds_new[k + 1]]
            for (s0, e0, slot), (s1, e1, _) in zip(old, new):
                assert tags[s1] == tax.tag_index["B-" + slot]
                assert all(tags[t] == tax.tag_index["I-" + slot] for t in range(s1 + 1, e1))
                yield ex["ids"][s0:e0], ids[s1:e1], slot


def test_novel_stems_keep_tails_context_and_other_spans(workdir, tax):
    class A:  # argparse-like: only the made-up stems
        aug_swap, aug_drop, aug_filler, aug_novel = 0.0, 0.0, 0.0, 1.0
    data = train.encode_splits(str(workdir / "data"), str(workdir / "vocab.txt"), tax, 128)
    aug = train.Augmenter(data, tax, A, random.Random(5))
    stems = set(aug.name_chars) | set(aug.common)
    renamed = 0
    for a, b, slot in augmented_spans(aug, data, tax, 10):
        if a == b:
            continue
        assert slot in train.NOVEL_SLOTS
        renamed += 1
        # A stem of 1-4 name or common characters, then a tail of the old value.
        assert any(b[-k:] == a[-k:] and 1 <= len(b) - k <= 4 and
                   set(b[:len(b) - k]) <= stems for k in range(1, len(a))), (a, b)
    assert renamed > 0


def test_place_augmentation_relabels_only_addresses_and_appends_a_tail(workdir, tax):
    data = train.encode_splits(str(workdir / "data"), str(workdir / "vocab.txt"), tax, 128)

    class A:  # argparse-like: only the place augmentations
        aug_swap, aug_drop, aug_filler, aug_place, aug_tail_place = 0.0, 0.0, 0.0, 1.0, 0.0
        vocab, seed = str(workdir / "vocab.txt"), 3
    aug = train.Augmenter(data, tax, A, random.Random(7))
    places = {tuple(p) for p in aug.places}
    assert len(places) > 1000
    replaced = 0
    for a, b, slot in augmented_spans(aug, data, tax, 10):
        if a != b:
            assert slot == "address" and tuple(b) in places
            replaced += 1
    assert replaced > 0

    A.aug_place, A.aug_tail_place = 0.0, 1.0
    aug = train.Augmenter(data, tax, A, random.Random(8))
    tailed = 0
    # The same calls with their spans taken away: those of place intents must get a tail.
    bare = [dict(ex, tags=[train.IGNORE] + [0] * (len(ex["ids"]) - 2) + [train.IGNORE])
            for ex in data["splits"]["train"]]
    for ex in data["splits"]["train"] + bare:
        ids, tags = aug(ex)
        old = train.span_pieces(ex["ids"], ex["tags"], tax)
        if ids == ex["ids"]:
            # Left alone: the call names a place already, or its intent never has one.
            assert (any(p[2] in ("address", "district") for p in old)
                    or ex["intent"] not in aug.place_intents)
            continue
        tailed += 1
        n = len(ex["ids"]) - 1  # the old text, [SEP] excepted, is a prefix of the new one
        assert ids[:n] == ex["ids"][:n] and tags[:n] == ex["tags"][:n] and ids[-1] == ex["ids"][-1]
        new = train.span_pieces(ids, tags, tax)
        assert new[:-1] == old and new[-1][2] == "address" and new[-1][1] == len(ids) - 1
        assert new[-1][0] - n in (0, len(aug.seps[1]))
    assert tailed > 0


def test_smoke_train_export_parity(workdir, tax):
    common_args = ["--data", str(workdir / "data"), "--vocab", str(workdir / "vocab.txt"),
                   "--layers", "1", "--hidden", "32", "--heads", "2", "--ffn", "64",
                   "--epochs", "3", "--max-steps", "6", "--batch-size", "4", "--mlm-steps", "3",
                   "--threads", "2", "--device", "cpu", "--seed", "5"]
    r1 = train.main(common_args + ["--out", str(workdir / "run1")])
    r2 = train.main(common_args + ["--out", str(workdir / "run2")])
    assert r1["history"] == r2["history"]  # seeded: same losses and dev figures
    for name in os.listdir(workdir / "run1"):
        if name.endswith(".npz"):
            a, b = np.load(workdir / "run1" / name), np.load(workdir / "run2" / name)
            assert all(np.array_equal(a[k], b[k]) for k in a.files)
    # Warm start (fine-tuning on new data) begins from exactly the saved weights.
    r3 = train.main(common_args[:-2] + ["--seed", "6", "--epochs", "1", "--max-steps", "1",
                                        "--mlm-steps", "0", "--lr", "0",
                                        "--init", str(workdir / "run1"),
                                        "--out", str(workdir / "run3")])
    a, b = np.load(workdir / "run1" / "weights-0.npz"), np.load(workdir / "run3" / "weights-0.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a.files)  # lr 0: unchanged
    assert r3["test"]["intent_accuracy"] == r1["test"]["intent_accuracy"]
    out = workdir / "model"
    results, parity = export.main(["--run", str(workdir / "run1"), "--vocab",
                                   str(workdir / "vocab.txt"), "--data", str(workdir / "data"),
                                   "--out", str(out)])
    assert parity["n"] == len(LINES) and parity["max_abs_diff"] < 1e-3
    assert r1["challenge"]["n"] == 3 and results["challenge"]["n"] == 3
    assert "| challenge (hand-written, other voices) | 3 |" in (out / "README.md").read_text()
    assert parity["argmax_mismatches"] == 0
    for f in ("model.onnx", "vocab.txt", "labels.json", "model.yaml", "taxonomy.yaml",
              "README.md"):
        assert (out / f).exists(), f
    labels = json.loads((out / "labels.json").read_text())
    assert labels["intents"] == tax.intents and labels["slot_tags"] == tax.tags
    import yaml
    y = yaml.safe_load((out / "model.yaml").read_text())
    assert y["max_length"] == 128 and y["tokenizer"]["normalize_width"] is True
    assert y["outputs"] == {"intent": "intent_logits", "slots": "slot_logits"}

    # Dynamic axes: a batch/sequence shape the export never saw, against PyTorch.
    import onnxruntime as ort
    import torch
    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["input_ids", "attention_mask",
                                                   "token_type_ids"]
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 7000, size=(3, 11)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    ids[1, 7:] = 0
    tt = np.zeros_like(ids)
    oi, os_ = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt})
    assert oi.shape == (3, len(tax.intents)) and os_.shape == (3, 11, 25)
    model, _ = export.load_run(str(workdir / "run1"))
    with torch.no_grad():
        ti, ts = model(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(tt))
    # float32 ONNX Runtime vs PyTorch kernels: the seeded smoke model on the 125-intent data
    # differs by 1.1e-4 at most on a slot logit.
    assert np.abs(oi - ti.numpy()).max() < 3e-4
    assert np.abs(os_ - ts.numpy()).max() < 3e-4
    # Padding does not change the real tokens' outputs (the additive mask works).
    oi1, os1 = sess.run(None, {"input_ids": ids[1:2, :7], "attention_mask": mask[1:2, :7],
                               "token_type_ids": tt[1:2, :7]})
    assert np.abs(oi1 - oi[1:2]).max() < 1e-4 and np.abs(os1 - os_[1:2, :7]).max() < 1e-4


def test_train_help_runs():
    import subprocess
    r = subprocess.run([sys.executable, os.path.join(os.path.dirname(HERE), "train.py"),
                        "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--mlm-steps" in r.stdout and "--data" in r.stdout


def test_make_batches_covers_every_line_once():
    examples = [{"ids": [0] * (1 + (i * 7) % 23)} for i in range(101)]
    batches = train.make_batches(examples, 8, random.Random(1), pool=3)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(101))
    assert all(1 <= len(b) <= 8 for b in batches)
    # Within a pool, batches hold similar lengths: each batch is sorted by length.
    for b in batches:
        lens = [len(examples[i]["ids"]) for i in b]
        assert lens == sorted(lens)
    assert batches != train.make_batches(examples, 8, random.Random(2), pool=3)


def test_weight_ema_by_hand():
    import torch
    lin = torch.nn.Linear(2, 1, bias=True)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 2.0]]))
        lin.bias.fill_(4.0)
    ema = train.WeightEma(lin, 0.5)
    # Two "steps": the live weights move to w1 then w2; the average follows by hand:
    # e1 = 0.5 * w0 + 0.5 * w1, e2 = 0.5 * e1 + 0.5 * w2.
    w = [np.array([1.0, 2.0, 4.0]), np.array([3.0, -2.0, 0.0]), np.array([5.0, 6.0, 8.0])]
    e = w[0]
    for k in (1, 2):
        with torch.no_grad():
            lin.weight.copy_(torch.tensor([w[k][:2]], dtype=torch.float32))
            lin.bias.fill_(float(w[k][2]))
        ema.update()
        e = 0.5 * e + 0.5 * w[k]
    ema.swap()
    got = np.concatenate([lin.weight.detach().numpy().ravel(), lin.bias.detach().numpy()])
    assert np.allclose(got, e), (got, e)           # e = [3, 3.5, 5]
    ema.swap()
    got = np.concatenate([lin.weight.detach().numpy().ravel(), lin.bias.detach().numpy()])
    assert np.allclose(got, w[2])                  # the live weights are back
    with pytest.raises(ValueError):
        train.WeightEma(lin, 1.0)


def test_soup_average_by_hand(tmp_path):
    import soup
    a = {"w": np.array([[1.0, 2.0]], dtype=np.float16), "b": np.array([4.0], dtype=np.float32)}
    b = {"w": np.array([[3.0, -2.0]], dtype=np.float32), "b": np.array([0.0], dtype=np.float32)}
    avg = soup.average([{k: v.astype(np.float64) for k, v in d.items()} for d in (a, b)])
    assert avg["w"].dtype == np.float32 and np.allclose(avg["w"], [[2.0, 0.0]])
    assert np.allclose(avg["b"], [2.0])
    with pytest.raises(ValueError):
        soup.average([{"w": np.zeros((1, 2))}, {"w": np.zeros((2, 1))}])
    with pytest.raises(ValueError):
        soup.average([{"w": np.zeros(2)}, {"v": np.zeros(2)}])
    soup.write_weights(str(tmp_path), avg)  # round trip through the run-folder format
    back = soup.read_weights(str(tmp_path))
    assert set(back) == {"w", "b"} and np.allclose(back["w"], avg["w"])


def test_fp16_run_round_trip(tmp_path):
    import fp16_run
    import torch
    from model import BertJoint, load_weights
    run, out = tmp_path / "run", tmp_path / "half"
    m = BertJoint(50, 3, 5, 1, 16, 2, 32, dropout=0.0)
    train.save_run(str(run), m, {"layers": 1}, {"dev": {}})
    fp16_run.half_run(str(run), str(out))
    z = np.load(next(out.glob("weights-*.npz")))
    assert all(z[k].dtype == np.float16 for k in z.files)
    m2 = BertJoint(50, 3, 5, 1, 16, 2, 32, dropout=0.0)
    load_weights(m2, str(out))
    saved = set().union(*(np.load(p).files for p in out.glob("weights-*.npz")))
    sd1, sd2 = m.state_dict(), m2.state_dict()
    assert saved and saved <= set(sd2)
    for k in saved:  # what the run holds (no MLM head), FP16 rounding: relative 2^-11
        assert torch.allclose(sd1[k], sd2[k], rtol=1e-3, atol=1e-4), k
    assert (out / "config.json").exists()


def test_fp16_run_refuses_what_fp16_cannot_hold_and_replaces_stale_shards(tmp_path):
    import fp16_run
    run, out = tmp_path / "run", tmp_path / "half"
    run.mkdir()
    out.mkdir()
    np.savez(out / "weights-7.npz", old=np.zeros(2, np.float32))  # a stale shard of another run
    np.savez(run / "weights-0.npz", w=np.array([1.0, -65504.0], np.float32))
    fp16_run.half_run(str(run), str(out))
    assert sorted(p.name for p in out.glob("weights-*.npz")) == ["weights-0.npz"]
    assert np.load(out / "weights-0.npz")["w"].tolist() == [1.0, -65504.0]  # FP16's max: kept
    with pytest.raises(ValueError, match="same|must not"):
        fp16_run.half_run(str(run), str(run))
    np.savez(run / "weights-0.npz", w=np.array([1.0, 70000.0], np.float32))  # would become inf
    with pytest.raises(ValueError, match="70000"):
        fp16_run.half_run(str(run), str(tmp_path / "half2"))
    np.savez(run / "weights-0.npz", w=np.array([np.nan], np.float32))
    with pytest.raises(ValueError, match="NaN"):
        fp16_run.half_run(str(run), str(tmp_path / "half3"))
    np.savez(run / "weights-0.npz", w=np.array([3], np.int64))
    with pytest.raises(ValueError, match="not a float"):
        fp16_run.half_run(str(run), str(tmp_path / "half4"))


def test_soup_main_keeps_only_what_does_not_lower_dev_and_guards_its_inputs(workdir, tmp_path):
    import soup
    cache = tmp_path / "cache.json.gz"
    common_args = ["--data", str(workdir / "data"), "--vocab", str(workdir / "vocab.txt"),
                   "--layers", "1", "--hidden", "32", "--heads", "2", "--ffn", "64",
                   "--batch-size", "4", "--threads", "2", "--device", "cpu", "--cache", str(cache)]
    assert train.main(common_args + ["--encode-only"]) is None
    runs = []
    for seed in (7, 8):  # two short runs of one shape (different seeds: different weights)
        runs.append(str(tmp_path / f"r{seed}"))
        train.main(common_args + ["--epochs", "2", "--max-steps", "4", "--seed", str(seed),
                                  "--lr", "1e-3", "--out", runs[-1]])
    before = {p: p.read_bytes() for p in (tmp_path / "r8").iterdir()}
    with pytest.raises(SystemExit, match="one of the runs"):  # any input, not only the best
        soup.main(["--cache", str(cache), "--out", runs[1], *runs])
    assert {p: p.read_bytes() for p in (tmp_path / "r8").iterdir()} == before
    out = tmp_path / "soup"
    res = soup.main(["--cache", str(cache), "--out", str(out), *runs])
    cfg = json.loads((out / "config.json").read_text())
    kept = cfg["soup"]["runs"]
    assert set(kept) <= set(runs) and kept
    # The written weights are the element-wise mean of the kept runs' weights (numpy, by hand).
    from model import read_weight_arrays
    mean = {}
    for r in kept:
        for k, v in read_weight_arrays(r, np.float64).items():
            mean[k] = mean.get(k, 0.0) + v / len(kept)
    got = read_weight_arrays(str(out), np.float32)
    assert set(got) == set(mean) and all(np.allclose(got[k], mean[k], atol=1e-6) for k in mean)
    # Each run's own dev score, from its metrics.json (train.py's figures): the soup's is no lower.
    own = [json.loads(open(os.path.join(r, "metrics.json")).read())["dev"] for r in runs]
    assert soup.score(res["dev"]) >= max(soup.score(m) for m in own) - 1e-9
    assert "partial" not in json.loads((out / "metrics.json").read_text())
    # A cache encoded with another vocabulary is refused by name, not scored.
    other_vocab = tmp_path / "vocab2.txt"
    other_vocab.write_text((workdir / "vocab.txt").read_text(encoding="utf-8") + "新词\n",
                           encoding="utf-8")
    cache2 = tmp_path / "cache2.json.gz"
    train.main(["--data", str(workdir / "data"), "--vocab", str(other_vocab), "--cache",
                str(cache2), "--encode-only"])
    with pytest.raises(SystemExit, match="vocab_sha"):
        soup.main(["--cache", str(cache2), "--out", str(tmp_path / "soup2"), *runs])


def test_ema_and_smoothing_out_of_range_are_refused_before_any_work(capsys):
    for bad in (["--ema", "-0.5"], ["--ema", "1"], ["--intent-smoothing", "1.5"],
                ["--intent-smoothing", "-0.1"]):
        with pytest.raises(SystemExit) as e:  # argparse's error: exit status 2, message on stderr
            train.main(["--data", "/nonexistent", "--out", "/nonexistent/run", *bad])
        assert e.value.code == 2
        assert bad[0] in capsys.readouterr().err
