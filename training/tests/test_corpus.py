"""Corpus stage, pretraining masks, calibration, FP16 storage, the dispatcher's training and
export, and the CAIS conversion, on small synthetic inputs (no corpus needed)."""
import gzip
import json
import os
import random
import sys

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import calibration  # noqa: E402
import corpus  # noqa: E402
import onnx_fp16  # noqa: E402
import pretrain  # noqa: E402
import slu_sets  # noqa: E402
import train_classifier  # noqa: E402

SEED = int(os.environ.get("HOTLINE_TEST_SEED", random.SystemRandom().randrange(2**31)))


def test_mask_pii_masks_identifiers_and_keeps_other_numbers():
    counts = {}
    text = ("身份证110105198806071234，手机13812345678，座机0898-66123456，车牌琼A12345，"
            "工单20180107184928，金额35000元")
    got = corpus.mask_pii(text, counts)
    assert "110105198806071234" not in got and "[身份证号]" in got
    assert "13812345678" not in got and "[手机号]" in got
    assert "0898-66123456" not in got and "[电话]" in got
    assert "琼A12345" not in got and "[车牌号]" in got
    assert "20180107184928" in got and "35000" in got  # an order number and an amount stay
    assert counts == {"id": 1, "mobile": 1, "landline": 1, "plate": 1}


def test_mask_names_keeps_the_surname():
    got = corpus.mask_names("市民王建国来电反映小区停水")
    assert "王建国" not in got and "王某某" in got


def test_corpus_without_a_folder_says_so_and_succeeds(capsys, tmp_path):
    assert corpus.main(["--corpus", str(tmp_path / "absent"), "--out", str(tmp_path)]) == 0
    assert "corpus stage skipped" in capsys.readouterr().out


def _write_gz(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    src = root / "src"
    _write_gz(str(src / "pretrain" / "customer_service_qa" / "part-000.txt.gz"),
              ["花呗怎么还款", "我的快递什么时候到", "退款申请提交了吗，电话13912345678"] * 20)
    _write_gz(str(src / "pretrain" / "dialog_utterances" / "part-000.txt.gz"),
              ["明天早上六点叫我起床", "播放一首歌"] * 20)
    orders = []
    for k in range(40):
        dept = ["公安局交通警察支队", "城市管理行政执法局"][k % 2]
        text = ["市民来电反映：某路口红绿灯不亮，请交警部门核实处理。",
                "市民来电反映：小区门口有人占道经营，请城管部门核实处理。"][k % 2]
        orders.append(json.dumps({"text": text, "label": dept, "cat1": "城市管理",
                                  "cat2": ["交通", "市容"][k % 2], "cat3": "", "cat4": "",
                                  "order_id": f"2018{k:010d}"}, ensure_ascii=False))
    _write_gz(str(src / "hotline_haikou_12345" / "orders.jsonl.gz"), orders)
    own = root / "own"
    own.mkdir()
    (own / "train.jsonl").write_text(json.dumps({"text": "我家停水了", "intent": "water_outage",
                                                 "slots": []}, ensure_ascii=False) + "\n",
                                     encoding="utf-8")
    out = root / "out"
    assert corpus.main(["--corpus", str(src), "--out", str(out), "--own-data", str(own),
                        "--procs", "1", "--dev-frac", "0.1", "--test-frac", "0.2"]) == 0
    return out


def test_corpus_shards_decode_to_the_masked_text_with_word_starts(tiny_corpus):
    import jieba
    vocab = (tiny_corpus / "vocab.txt").read_text(encoding="utf-8").split("\n")
    with np.load(tiny_corpus / "pretrain-customer_service_qa.npz") as z:
        ids, starts = z["ids"], z["starts"]
    sep = vocab.index("[SEP]")
    texts = []
    for s in starts:
        e = s
        while ids[e] != sep:
            e += 1
        texts.append(ids[s:e])
    first = texts[2]
    chars = "".join(vocab[t & 0x7FFF] for t in first)
    assert chars == "退款申请提交了吗,电话[手机号]" or chars.startswith("退款申请")
    assert "13912345678" not in "".join(vocab[t & 0x7FFF] for t in ids)
    # Word starts where jieba (no HMM) starts a word.
    text = "我的快递什么时候到"
    arr = texts[1]
    assert "".join(vocab[t & 0x7FFF] for t in arr) == text
    pos, want = 0, set()
    for w in jieba.cut(text, HMM=False):
        want.add(pos)
        pos += len(w)
    got = {i for i, t in enumerate(arr) if t & 0x8000}
    assert got == want


def test_corpus_splits_orders_by_number_and_reports_coverage(tiny_corpus):
    def ids(name):
        with open(tiny_corpus / "haikou" / f"{name}.jsonl", encoding="utf-8") as f:
            return [json.loads(l)["order_id"] for l in f]
    train, dev, test = ids("train"), ids("dev"), ids("test")
    assert (len(train), len(dev), len(test)) == (28, 4, 8)
    assert max(train) < min(dev) and max(dev) < min(test)
    rep = json.loads((tiny_corpus / "report.json").read_text(encoding="utf-8"))
    assert rep["haikou_unk_rate"] == 0.0
    # The held-out orders stay out of pretraining.
    assert rep["sources"]["haikou_orders"]["texts"] == 32


def test_whole_word_masking_masks_whole_words_only():
    rng = np.random.default_rng(SEED)
    # Words: [10 11 12] [13] [14 15]; flags on word starts; a [SEP] (3) in the middle.
    row = np.array([10 | 0x8000, 11, 12, 13 | 0x8000, 3, 14 | 0x8000, 15], dtype=np.int64)
    raw = np.tile(row, (400, 1))
    inp, attn, lab = pretrain.mask_batch(raw, rng, vocab=100, rate=0.3, device="cpu")
    lab = lab.numpy()[:, 1:-1]
    chosen = lab != -100
    assert not chosen[:, 4].any()  # [SEP] never
    assert (chosen[:, 0] == chosen[:, 1]).all() and (chosen[:, 1] == chosen[:, 2]).all()
    assert (chosen[:, 5] == chosen[:, 6]).all()
    assert (lab[chosen] == np.tile(row & 0x7FFF, (400, 1))[chosen]).all()
    rate = chosen[:, [0, 3, 5]].mean()
    assert 0.2 < rate < 0.4  # 1,200 Bernoulli(0.3) draws: 7 standard deviations either side
    i = inp.numpy()[:, 1:-1]
    assert (i[chosen] == pretrain.MASK).mean() > 0.6
    assert (inp.numpy()[:, 0] == pretrain.CLS).all() and (inp.numpy()[:, -1] == pretrain.SEP).all()


def test_head_tail_by_hand():
    ids = list(range(100, 120))  # 20 tokens
    got = train_classifier.head_tail(ids, 10, 2, 3)  # 8 kept: 4 head + 4 tail
    assert got == [2, 100, 101, 102, 103, 116, 117, 118, 119, 3]
    assert train_classifier.head_tail(ids[:5], 10, 2, 3) == [2] + ids[:5] + [3]
    got = train_classifier.head_tail(ids, 11, 2, 3)  # 9 kept: 5 head + 4 tail
    assert got == [2, 100, 101, 102, 103, 104, 116, 117, 118, 119, 3]


def test_strip_request_removes_the_closing_request_and_boilerplate():
    t = "市民来电反映：路灯不亮。请城管部门核实处理！（请职能局按规定在30分钟内核实处理，响应处置）"
    assert train_classifier.strip_request(t) == "市民来电反映：路灯不亮。"


def test_temperature_recovers_a_known_temperature():
    rng = np.random.default_rng(SEED)
    logits = rng.normal(0, 3, size=(20000, 6))
    p = calibration.softmax(logits, 2.0)
    gold = np.array([rng.choice(6, p=row) for row in p])
    t = calibration.fit_temperature(logits, gold)
    assert abs(t - 2.0) < 0.2
    assert calibration.ece(calibration.softmax(logits, t), gold) < \
        calibration.ece(calibration.softmax(logits), gold)


def test_ece_by_hand():
    probs = np.array([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.6, 0.4]])
    gold = np.array([0, 1, 0, 0])
    # Bins: 0.9 (acc 0.5, weight 0.5) and 0.6 (acc 1.0, weight 0.5): 0.5*0.4 + 0.5*0.4
    assert calibration.ece(probs, gold) == pytest.approx(0.4)


def test_handoff_threshold_respects_the_rate():
    probs = np.array([[0.95, 0.05]] * 97 + [[0.35, 0.65]] * 3)
    gold = np.array([0] * 97 + [1] * 3)
    # Confidence 0.65 on 3%: every threshold of the grid up to 0.80 hands off at most 3%.
    h = calibration.handoff_threshold(probs, gold, max_rate=0.03)
    assert h["threshold"] == pytest.approx(0.80) and h["rate"] == pytest.approx(0.03)
    assert h["accuracy_below"] == 1.0 and h["accuracy_above"] == 1.0
    # At most 2%: the threshold must stay at or below 0.65, where nothing falls below.
    h = calibration.handoff_threshold(probs, gold, max_rate=0.02)
    assert h["threshold"] == pytest.approx(0.65) and h["rate"] == 0.0


def test_fp16_storage_matches_rounded_weights_in_onnx_runtime(tmp_path):
    import onnx
    import onnxruntime as ort
    torch.manual_seed(SEED % 1000)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    path = str(tmp_path / "m.onnx")
    x = torch.randn(3, 16)
    torch.onnx.export(m, (x,), path, input_names=["x"], output_names=["y"], opset_version=14)
    size32 = os.path.getsize(path)
    n = onnx_fp16.store_fp16(path, min_elems=8)
    assert n == 3 and os.path.getsize(path) < size32 * 0.7  # the 4-element bias stays FP32
    kinds = sorted(i.data_type for i in onnx.load(path).graph.initializer)
    assert kinds == [onnx.TensorProto.FLOAT] + [onnx.TensorProto.FLOAT16] * 3
    onnx_fp16.round_state_dict_fp16(m, min_elems=8)
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x.numpy()})[0]
    with torch.no_grad():
        ref = m(x).numpy()
    assert np.abs(got - ref).max() < 1e-5


def test_cais_bioes_with_removed_spaces_by_hand():
    r = {"text": "周杰伦夜曲", "label": "PlayMusic",
         "bio": ["B-singer_name", "I-singer_name", "E-singer_name", "", "B-song_name",
                 "E-song_name"]}
    got = slu_sets.cais_row(r)
    assert got["slots"] == [
        {"type": "singer_name", "start": 0, "end": 3, "value": "周杰伦"},
        {"type": "song_name", "start": 3, "end": 5, "value": "夜曲"}]
    r = {"text": "放许嵩的歌", "label": "PlayMusic", "bio": ["O", "B-s", "E-s", "S-t", "O"]}
    assert [(s["value"], s["type"]) for s in slu_sets.cais_row(r)["slots"]] == \
        [("许嵩", "s"), ("的", "t")]


def test_classifier_trains_exports_and_matches_onnx_runtime(tiny_corpus, tmp_path):
    import export_classifier
    run = tmp_path / "run"
    res = train_classifier.main([
        "--data", str(tiny_corpus / "haikou"), "--vocab", str(tiny_corpus / "vocab.txt"),
        "--out", str(run), "--layers", "1", "--hidden", "32", "--heads", "2", "--ffn", "64",
        "--epochs", "2", "--batch-size", "8", "--max-length", "24", "--device", "cpu",
        "--seed", str(SEED % 1000)])
    assert res["departments"] == 2 and "test" in res
    cfg = json.loads((run / "config.json").read_text(encoding="utf-8"))
    assert cfg["labels"]["department"] == sorted(cfg["labels"]["department"],
                                                 key=lambda k: k)  # equal counts: by name
    out = tmp_path / "folder"
    rep = export_classifier.main(["--run", str(run), "--vocab", str(tiny_corpus / "vocab.txt"),
                                  "--data", str(tiny_corpus / "haikou"), "--out", str(out)])
    assert rep["test"]["parity_max_abs"] < 2e-3
    yaml_text = (out / "model.yaml").read_text(encoding="utf-8")
    assert "kind: classifier" in yaml_text and "long_text: head_tail" in yaml_text
    labels = json.loads((out / "labels.json").read_text(encoding="utf-8"))
    assert set(labels) == {"department", "category"}
    # The folder's weights map gives back the run's encoder (FP16-rounded), key for key.
    from model import read_weight_arrays
    got, dims = onnx_fp16.load_mapped(str(out))
    run_w = read_weight_arrays(str(run))
    enc_keys = {k[len("bert."):] for k in run_w if k.startswith("bert.") and "mlm_" not in k}
    assert set(got) == enc_keys
    assert dims == {"layers": 1, "hidden": 32, "ffn": 64, "heads": 2}
    for k, v in got.items():
        ref = run_w["bert." + k]
        ref = ref.astype(np.float16).astype(np.float32) if ref.size >= onnx_fp16.MIN_ELEMS else ref
        assert np.array_equal(v, ref), k
    # A city's training starts from the folder.
    res2 = train_classifier.main([
        "--data", str(tiny_corpus / "haikou"), "--vocab", str(tiny_corpus / "vocab.txt"),
        "--out", str(tmp_path / "run2"), "--init-model", str(out), "--epochs", "1",
        "--batch-size", "8", "--max-length", "24", "--device", "cpu"])
    assert res2["departments"] == 2
    # The heads come along by label name: a model whose labels are the folder's in another
    # order plus one new label gives ONNX Runtime's logits of the folder, permuted, for the
    # labels both know.
    import onnxruntime as ort
    old = labels["department"]
    new = ["新部门"] + old[::-1]
    model = train_classifier.Classifier(int(cfg["vocab_size"]), {"department": len(new)},
                                        1, 32, 2, 64, 0.0)
    model.bert.load_state_dict({k: torch.from_numpy(v) for k, v in got.items()}, strict=False)
    rep3 = train_classifier.init_heads_by_label(model, str(out), {"department": new})
    assert rep3 == {"department": (len(old), 1)}
    model.eval()
    tok = train_classifier.Tok(str(out / "vocab.txt"), 24)
    ids = np.asarray(tok(["市民反映路灯不亮"]), dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
             "token_type_ids": np.zeros_like(ids)}
    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    ref = sess.run(["department_logits"], feeds)[0][0]
    with torch.no_grad():
        mine = model(*(torch.from_numpy(feeds[k]) for k in
                       ("input_ids", "attention_mask", "token_type_ids")))[0][0].numpy()
    for i, name in enumerate(new[1:], 1):
        assert abs(mine[i] - ref[old.index(name)]) < 1e-3, name
    # An update with orders of one department only: --keep-labels keeps the other one too.
    one = tmp_path / "one"
    one.mkdir()
    for split in ("train", "dev", "test"):
        rows = [json.loads(x) for x in (tiny_corpus / "haikou" / f"{split}.jsonl")
                .read_text(encoding="utf-8").splitlines()]
        keep = [r for r in rows if r["label"] == old[0]]
        assert keep and len(keep) < len(rows)
        (one / f"{split}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in keep), encoding="utf-8")
    for flag, want in (([], [old[0]]), (["--keep-labels"], [old[0], old[1]])):
        r = tmp_path / ("upd" + "".join(flag))
        train_classifier.main(["--data", str(one), "--vocab", str(out / "vocab.txt"),
                               "--out", str(r), "--init-model", str(out), "--epochs", "1",
                               "--batch-size", "8", "--max-length", "24", "--device", "cpu"]
                              + flag)
        got_labels = json.loads((r / "config.json").read_text(encoding="utf-8"))["labels"]
        assert got_labels["department"] == want


def test_pseudo_label_align_by_hand():
    import pseudo_label
    # Intents 0,1 belong to department a, 2 to b, 3 is a dialog act (not eligible).
    intent_dept = ["a", "a", "b", "hotline"]
    eligible = [True, True, True, False]
    probs = np.array([
        [0.1, 0.6, 0.2, 0.1],   # label X: votes a (intent 1)
        [0.5, 0.1, 0.3, 0.1],   # label X: votes a (intent 0)
        [0.0, 0.2, 0.3, 0.5],   # label X: eligible argmax is b; within a, intent 1 (0.2)
        [0.1, 0.1, 0.2, 0.6],   # label Y: votes b
        [0.2, 0.3, 0.1, 0.4],   # label Y: votes a; no department has more than half
    ])
    labels = ["X", "X", "X", "Y", "Y"]
    picked, mapping = pseudo_label.align(probs, labels, intent_dept, eligible, min_share=0.6,
                                         min_count=2, min_prob=0.05)
    assert mapping["X"]["dept"] == "a" and mapping["X"]["share"] == round(2 / 3, 3)
    assert picked.tolist()[:3] == [1, 0, 1]
    assert mapping["Y"]["dept"] is None and picked.tolist()[3:] == [-1, -1]  # share 0.5 < 0.6
    # A hand-set mapping replaces the vote; None drops the label.
    picked, mapping = pseudo_label.align(probs, labels, intent_dept, eligible, min_share=0.6,
                                         min_count=2, overrides={"Y": "b", "X": None})
    assert picked.tolist() == [-1, -1, -1, 2, 2]
    assert mapping["Y"]["by_hand"] and mapping["Y"]["share"] == 0.5
    # Below min_prob within the mapped department: left out (0.1 < 0.15 <= 0.2).
    picked, _ = pseudo_label.align(probs, labels, intent_dept, eligible, min_count=2,
                                   min_prob=0.15, overrides={"Y": "b", "X": None})
    assert picked.tolist() == [-1, -1, -1, 2, -1]


def test_pseudo_label_cleans_the_operators_words():
    import pseudo_label
    t = "市民来电反映：某小区门口垃圾没人清运。请市城管局核实处理！（请职能局在规定时间内办结）"
    got = pseudo_label.clean_text(t)
    assert "请市城管局" not in got and "职能局" not in got and "垃圾没人清运" in got
    assert pseudo_label.PREFIX.sub("", got, count=1).startswith("某小区")


def test_pseudo_label_batched_logits_equal_single_text_runs(tmp_path):
    """run_model pads texts of different lengths into batches; each row must equal ONNX Runtime
    run on that text alone (the shipped model folder, no padding)."""
    import onnxruntime as ort
    import pseudo_label
    from common import Encoder
    folder = os.path.join(os.path.dirname(HERE), "..", "models", "default")
    texts = ["我家停水了", "市民来电反映：某小区门口垃圾好几天没人清运，请尽快处理。",
             "社保卡丢了怎么补办", "喂", "公交车司机态度很差还乱收费"]
    tax, logits = pseudo_label.run_model(folder, texts, batch=2)
    enc = Encoder(os.path.join(folder, "vocab.txt"), tax, 128)
    sess = ort.InferenceSession(os.path.join(folder, "model.onnx"),
                                providers=["CPUExecutionProvider"])
    for i, t in enumerate(texts):
        ids = np.asarray([enc.tokenize(t)[0]], np.int64)
        one = sess.run(["intent_logits"], {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                           "token_type_ids": np.zeros_like(ids)})[0][0]
        assert np.allclose(logits[i], one, atol=1e-4), (t, np.abs(logits[i] - one).max())


def test_city_trains_a_folder_with_a_report_then_updates_it(tiny_corpus, tmp_path):
    """make train's script end to end on 40 orders: a folder ONNX Runtime runs, REPORT.md with
    the anchor beside the model, then an update with newer orders of one department that keeps
    the other department (--update)."""
    import city
    import onnxruntime as ort
    orders = tiny_corpus.parent / "src" / "hotline_haikou_12345" / "orders.jsonl.gz"
    first = tmp_path / "first"
    assert city.main(["--data", str(orders), "--out", str(first), "--init", "", "--epochs", "1",
                      "--device", "cpu", "--max-length", "32", "--dev-frac", "0.2",
                      "--test-frac", "0.2"]) == 0
    report = (first / "REPORT.md").read_text(encoding="utf-8")
    assert "split by order_id" in report and "| this model |" in report
    assert "(anchor)" in report  # the TF-IDF anchor ran on the same split
    labels = json.loads((first / "labels.json").read_text(encoding="utf-8"))
    assert sorted(labels["department"]) == ["公安局交通警察支队", "城市管理行政执法局"]
    for d in labels["department"]:
        assert f"| {d} |" in report
    sess = ort.InferenceSession(str(first / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [o.name for o in sess.get_outputs()][:1] == ["department_logits"]
    newer = tmp_path / "newer.jsonl"
    with gzip.open(orders, "rt", encoding="utf-8") as f:
        rows = [json.loads(x) for x in f if x.strip()]
    one = [dict(r, order_id="2019" + r["order_id"][4:]) for r in rows
           if r["label"] == "城市管理行政执法局"]
    newer.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in one),
                     encoding="utf-8")
    upd = tmp_path / "upd"
    assert city.main(["--data", str(newer), "--out", str(upd), "--init", str(first),
                      "--update", "--epochs", "1", "--device", "cpu", "--max-length", "32",
                      "--no-anchor"]) == 0
    got = json.loads((upd / "labels.json").read_text(encoding="utf-8"))["department"]
    assert got == ["城市管理行政执法局", "公安局交通警察支队"]
    with pytest.raises(SystemExit):
        city.main(["--data", str(newer), "--out", str(tmp_path / "x"), "--init", "",
                   "--update"])
