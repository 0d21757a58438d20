"""Tests for the hotline data generator, validator and near-duplicate report.

Run: python -m pytest -q training/data_gen/tests/test_data_gen.py
"""
import collections
import json
import os
import random
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
GEN_DIR = os.path.dirname(HERE)
REPO = os.path.abspath(os.path.join(GEN_DIR, "..", ".."))
DATA = os.path.join(REPO, "data", "hotline")
sys.path.insert(0, GEN_DIR)

import augment  # noqa: E402
import label_consistency  # noqa: E402
import near_dup  # noqa: E402
import autolabel  # noqa: E402
import challenge  # noqa: E402
import pools  # noqa: E402
import template  # noqa: E402
import validate  # noqa: E402
from taxonomy import Taxonomy  # noqa: E402

TAX = Taxonomy()


def run(script, *args):
    return subprocess.run([sys.executable, os.path.join(GEN_DIR, script), *args],
                          capture_output=True, text=True, timeout=300)


def write_jsonl(path, objs):
    with open(path, "w", encoding="utf-8") as f:
        for o in objs:
            f.write((o if isinstance(o, str) else json.dumps(o, ensure_ascii=False)) + "\n")


# ------------------------------------------------------------------ taxonomy

def test_taxonomy_matches_yaml_text():
    text = open(os.path.join(REPO, "config", "taxonomy", "hotline.yaml"), encoding="utf-8").read()
    ids = re.findall(r"^\s*- \{id: ([a-z_]+),", text, re.M)
    assert TAX.intent_ids == ids and len(ids) == 125
    # Ids are a contract: the shipped model's labels (the first 55 intents) stay a prefix.
    labels = json.load(open(os.path.join(REPO, "models", "default", "labels.json"), encoding="utf-8"))
    assert ids[:len(labels["intents"])] == labels["intents"]
    assert TAX.intent_by_id["street_light"]["category"] == "city_management"
    assert TAX.intent_by_id["street_light"]["dept"] == "city_mgmt"
    assert TAX.intent_by_id["gas_leak"]["co_depts"] == ["fire"]
    assert TAX.slots[0] == "person_name" and TAX.slots[-1] == "item" and len(TAX.slots) == 12
    assert TAX.intent_by_id["taxi_complaint"]["required_slots"] == ["plate_number"]
    assert TAX.intent_by_id["greeting"]["kind"] == "dialog"


# ------------------------------------------------------------------ validator

GOOD = {"text": "朝阳区建国路88号工地晚上十一点还在打桩", "intent": "construction_noise",
        "slots": [{"type": "district", "start": 0, "end": 3, "value": "朝阳区"},
                  {"type": "address", "start": 3, "end": 9, "value": "建国路88号"},
                  {"type": "time", "start": 11, "end": 16, "value": "晚上十一点"}]}


def bad(**changes):
    ex = json.loads(json.dumps(GOOD))
    for k, v in changes.items():
        ex[k] = v
    return ex


def slot(t, s, e, text):
    return {"type": t, "start": s, "end": e, "value": text[s:e]}


@pytest.mark.parametrize("ex,needle", [
    (bad(intent="noise"), "unknown intent 'noise'"),
    (bad(slots=[{"type": "street", "start": 0, "end": 3, "value": "朝阳区"}]), "unknown slot type"),
    (bad(slots=[{"type": "district", "start": 0, "end": 3, "value": "朝阳"}]), "text[0:3] is '朝阳区'"),
    (bad(slots=[{"type": "district", "start": 5, "end": 40, "value": "x"}]), "expected 0 <= start < end"),
    (bad(slots=[slot("district", 0, 3, GOOD["text"]), slot("address", 2, 9, GOOD["text"])]), "overlap"),
    (bad(text="工地在建国路88号", slots=[slot("address", 2, 9, "工地在建国路88号")]), "starts with '在'"),
    (bad(text="建国路88号的工地", slots=[slot("address", 0, 7, "建国路88号的工地")]), "ends with '的'"),
    (bad(text="打桩 建国路88号", slots=[slot("address", 2, 9, "打桩 建国路88号")]), "starts with ' '"),
    (bad(text="建国路88号，工地", slots=[slot("address", 0, 7, "建国路88号，工地")]), "ends with '，'"),
    (bad(text=""), "non-empty string 'text'"),
    (bad(extra=1), "unexpected keys"),
    ([1, 2], "expected a JSON object"),
    # The inconsistency classes of the 2026-12-01 data findings:
    (bad(text="我的身份证丢了", slots=[]), "'身份证' at 2..5 is a item (autolabel.py) but not labelled"),
    (bad(text="这个月的养老金没到", slots=[]), "'这个月' at 0..3 is a time"),
    (bad(text="每天早上五点就开始吵", slots=[]), "'早上五点' at 2..6 is a time"),
    (bad(text="昨天晚上十点还在打桩", slots=[slot("time", 0, 2, "昨天晚上十点还在打桩")]),
     "'晚上十点' at 2..6 is a time"),
    (bad(text="昨天晚上还在打桩", slots=[slot("time", 0, 2, "昨天晚上还在打桩"),
                                   slot("time", 2, 4, "昨天晚上还在打桩")]), "both time and touch"),
    (bad(text="朝阳工地", slots=[slot("district", 0, 2, "朝阳工地")]), "does not end with"),
    (bad(text="住建国路88号", slots=[slot("address", 0, 7, "住建国路88号")]), "starts with the verb"),
    (bad(text="建国路附近有工地", slots=[slot("address", 0, 5, "建国路附近有工地")]), "position word"),
    ({"text": "买的牛奶过期了", "intent": "food_safety", "slots": []}, "'牛奶' at 2..4 is a item"),
])
def test_validator_rejects(ex, needle):
    errs = validate.check_example(ex, TAX, labelled=True)
    assert any(needle in e for e in errs), errs


def test_validator_accepts_good_and_edge_words():
    assert validate.check_example(GOOD, TAX, True) == []
    text = "星空网吧里有人抽烟"
    ex = {"text": text, "intent": "consumer_complaint", "slots": [slot("organization", 0, 4, text)]}
    assert validate.check_example(ex, TAX, True) == []
    assert validate.check_example({"text": "你好"}, TAX, labelled=False) == []
    assert validate.check_example({"text": "你好", "intent": "greeting"}, TAX, labelled=False)


def test_validator_cli_exit_codes(tmp_path):
    good = tmp_path / "dev.jsonl"
    write_jsonl(good, [GOOD])
    r = run("validate.py", str(good))
    assert r.returncode == 0, r.stderr
    broken = tmp_path / "test.jsonl"
    write_jsonl(broken, [GOOD, "{not json", bad(intent="nope")])
    r = run("validate.py", str(good), str(broken))
    assert r.returncode == 1
    assert "test.jsonl:2: invalid JSON" in r.stderr and "test.jsonl:3: unknown intent" in r.stderr
    train = tmp_path / "train.jsonl"  # one utterance of one intent: every other intent is short
    write_jsonl(train, [GOOD])
    r = run("validate.py", str(train), "--min-train", "1")
    assert r.returncode == 1 and "intent pension_inquiry has 0 utterances" in r.stderr
    r = run("validate.py", str(tmp_path / "missing.jsonl"))
    assert r.returncode == 1 and "cannot open" in r.stderr


# ------------------------------------------------------------------ pools

def test_id_check_digit_against_standard_examples():
    # Examples printed in GB 11643-1999 and widely quoted.
    assert pools.id_check_digit("11010519491231002") == "X"
    assert pools.id_check_digit("44052418800101001") == "4"
    # Hand computation: 1*7+1*9+0*10+1*5+0*8+5*4+1*2+9*1+8*6+8*3+0*7+6*9+0*10+7*5+1*8+2*4+3*2
    # = 235; 235 % 11 = 4 -> "10X98765432"[4] = '8'.
    assert pools.id_check_digit("11010519880607123") == "8"


def test_generated_ids_are_mostly_valid():
    rng = random.Random(7)
    plain = [v for v in (pools.id_number(rng) for _ in range(3000)) if re.fullmatch(r"\d{17}[\dXx]", v)]
    assert len(plain) > 1800
    valid = sum(pools.id_check_digit(v[:17]) == v[17].upper() for v in plain)
    assert 0.85 < valid / len(plain) < 0.97  # about 8 % deliberately invalid


@pytest.mark.parametrize("n,zh", [(0, "零"), (10, "十"), (15, "十五"), (105, "一百零五"), (2000, "两千"),
                                  (1010, "一千零一十"), (35000, "三万五千"), (10500, "一万零五百"),
                                  (20000, "两万"), (250000, "二十五万")])
def test_num_zh(n, zh):
    assert pools.num_zh(n) == zh


def test_pool_values_have_clean_edges_and_cover_the_country():
    rng = random.Random(3)
    for label, variants in template.SLOT_VARIANTS.items():
        for v in variants:
            for _ in range(300):
                val = template.slot_value(label, v, rng)
                assert val and not validate._bad_edge_char(val[0]) or val.startswith(validate.EDGE_WORDS_START), (label, v, val)
                assert not validate._bad_edge_char(val[-1]) or val.endswith(validate.EDGE_WORDS_END), (label, v, val)
    plates = {pools.plate_number(rng)[0] for _ in range(3000)}
    assert len(plates) == 31
    assert len({c for c, _ in pools.ALL_DISTRICTS}) >= 60


# ------------------------------------------------------------------ templates and augmentation

def test_template_parse_and_expand():
    nodes = template.parse_line("[请问|]{district}[的{address/road}|]停水{item:水表|水管}", "t:1")
    rng = random.Random(1)
    seen_opts = set()
    for _ in range(200):
        segs = template.expand(nodes, rng)
        labels = [l for _, l in segs if l]
        assert labels[0] == "district" and labels[-1] == "item"
        assert segs[-1][0] in ("水表", "水管")
        seen_opts.add(("address" in labels, segs[0][0].startswith("请问")))
    assert len(seen_opts) == 4  # both optional parts are sometimes present, sometimes not


@pytest.mark.parametrize("line,needle", [
    ("{street}", "unknown slot or macro"), ("{address/moon}", "unknown variant"),
    ("{time", "unclosed"), ("[a|b", "unclosed '['"), ("a]b", "unexpected"),
    ("{item:的卡}", "starts/ends with a particle"), ("{foo:a|b}", "unknown slot type"),
])
def test_template_errors(line, needle):
    with pytest.raises(template.TemplateError, match=re.escape(needle)):
        template.parse_line(line, "t:1")


def test_augmentation_keeps_spans_exact():
    tf_lines = ["{place}的工地{time/night}还在施工，吵得[人|我们]睡不着，我再说一遍在{place}",
                "我的身份证是{id_number}，电话{phone}，怎么办什么时候能好",
                "{organization/employer}欠我{amount}，没有人管，我知道你们在忙"]
    rng = random.Random(11)
    changed = contacts = 0
    for line in tf_lines:
        nodes = template.parse_line(line, "t")
        for kind in ("answer", "dispatch", "dialog"):
            for _ in range(300):
                segs = template.expand(nodes, rng)
                before = [(t, l) for t, l in segs if l]
                aug = augment.augment(segs, rng, kind)
                ex = augment.to_example(aug)
                after = [(s["value"], s["type"]) for s in ex["slots"]]
                # Template slots survive unchanged and in order; augmentation may only append
                # contact details (name / phone / ID) after them.
                assert after[:len(before)] == before
                assert all(t in ("person_name", "phone", "id_number") for _, t in after[len(before):])
                contacts += len(after) > len(before)
                # The generator's last step labels closed-class words the augmenter may add
                # (上个月 in a background sentence); then the line must be valid.
                final = augment.to_example(autolabel.label_segments(aug))
                assert final["text"] == ex["text"]
                assert validate.check_example(dict(final, intent="pension_inquiry"), TAX, True) == []
                changed += ex["text"] != "".join(t for t, _ in segs)
    assert changed > 1500  # most utterances are actually augmented
    assert 20 < contacts < 300


# ------------------------------------------------------------------ generator end to end

def _tiny_templates(tmp_path):
    d = tmp_path / "templates"
    d.mkdir()
    (d / "water_outage.txt").write_text(
        "# comment\n## train\n"
        "{place}停水了[甲|乙|丙|丁]\n{place}没水[一|二|三|四]，{time}开始的\n水压低[子|丑|寅|卯]{place}\n"
        "## heldout\n{place}自来水发黄[东|西|南|北]\n{place}断水了[春|夏|秋|冬]\n", encoding="utf-8")
    (d / "greeting.txt").write_text(
        "## train\n[你好|您好|喂你好|喂][啊|呀|]\n[早上好|下午好|晚上好][啊|]\n"
        "## heldout\n[哈喽|嗨][你好|][啊|]\n[在吗|有人吗][喂|]\n", encoding="utf-8")
    return d


@pytest.mark.parametrize("text,want", [
    ("我今天必须要个说法", []),                      # bare 今天: not labelled
    ("今天下午三点停的电", [("今天下午三点", "time")]),
    ("昨天晚上十点多还在打桩", [("昨天晚上十点多", "time")]),
    ("每天早上五点开始叫", [("早上五点", "time")]),
    ("快一点好吗 一点点细流 3点5公里", []),            # not clocks
    ("三个月没发工资 今年十五岁 合同到期前一天", []),  # duration, 今年 alone, not a point
    ("去年九月份 2024年5月 二〇二五年十二月", [("去年九月份", "time"), ("2024年5月", "time"),
                                            ("二〇二五年十二月", "time")]),
    ("3号楼 8号线 八号那天", [("八号", "time")]),
    ("周末早上七点楼上在剁肉", [("周末早上七点", "time")]),
    ("社保卡和银行卡绑在一起", [("社保卡", "item"), ("银行卡", "item")]),
    ("身份证号不对 要居住证明", []),                 # the number, a certificate of residence
    ("打完百白破疫苗胳膊肿了", [("百白破疫苗", "item")]),
    ("买的牛奶过期了 眼镜店", []),                    # products only in PRODUCT_INTENTS
    ("一瓶水卖二十块 全部九块九 两万多块钱", [("二十块", "amount"), ("九块九", "amount"),
                                         ("两万多块钱", "amount")]),
    ("墙皮一块一块往下掉 我们一块去 两块砖", []),
    ("几十号会员 上百号人 二十号工人 几百号人", []),  # counts of people, not dates
    ("十五号人 这个月十五号发 二十号之前交", [("这个月十五号", "time"), ("二十号", "time")]),
])
def test_autolabel_find(text, want):
    assert [(text[s:e], t) for s, e, t in autolabel.find(text)] == want


def test_autolabel_segments_merge_and_skip_id_numbers():
    segs = [("在", None), ("昨天", "time"), ("晚上十点多吵", None)]
    assert autolabel.label_segments(segs) == [("在", None), ("昨天晚上十点多", "time"),
                                              ("吵", None)]
    segs = [("我的身份证", None), ("330106198806071234", "id_number")]
    assert autolabel.label_segments(segs) == segs
    assert autolabel.label_segments([("买的牛奶过期了", None)], products=True) == [
        ("买的", None), ("牛奶", "item"), ("过期了", None)]
    assert autolabel.label_segments([("买的牛奶过期了", None)]) == [("买的牛奶过期了", None)]


def test_every_time_and_amount_pool_value_is_one_autolabel_span():
    # The pools and the grammar agree, so a time or an amount said in plain text is labelled like
    # a {time} / {amount} fill.
    rng = random.Random(5)
    for variant in (None, "past", "night", "day", "recent", "future", "date"):
        for _ in range(400):
            v = pools.time_value(rng, variant)
            assert autolabel.find(v) == [(0, len(v), "time")], (variant, v)
    for variant in (None, "small", "large", "fare"):
        for _ in range(400):
            v = pools.amount(rng, variant)
            assert autolabel.find(v) == [(0, len(v), "amount")], (variant, v)


def test_spoken_amounts_and_branch_names_cover_the_colloquial_forms():
    # data v5: money as callers say it and organisations as branches/outlets. A spoken amount is
    # either not an autolabel match at all (两千五, 三千来块, 八百多: labelled only where a template
    # says {amount/spoken}) or one whole-value match, never a partial span inside the value.
    rng = random.Random(11)
    vals = [pools.amount(rng, "spoken") for _ in range(3000)]
    for v in vals:
        assert autolabel.find(v) in ([], [(0, len(v), "amount")]), v
    forms = {
        "unitless 两千五/一万二": r"^[一两三四五六七八九][百千万][一二三四五六七八九]$",
        "来块/多": r"^[一两三四五六七八九][百千万](来块|多)",
        "range 五六百块钱": r"^([一二三四五六七八])([二三四五六七八九])[十百千万]",
        "decimal 1.5万": r"^\d+\.\d万",
        "full 四百八十八元": r"^[一二三四五六七八九][百千].*[元块]",
        "块把钱": r"把块?钱$",
    }
    for name, pat in forms.items():
        assert any(re.search(pat, v) for v in vals), name
    digits = "一二三四五六七八九"
    for v in vals:  # a range is two consecutive digits (五六百), never 五三百
        m = re.match(forms["range 五六百块钱"], v)
        if m and len(v) > 2 and v[2] in "十百千万":
            assert digits.index(m.group(2)) == digits.index(m.group(1)) + 1, v
    names = [pools.organization(rng, "branch") for _ in range(2000)]
    suffixes = ("分公司", "店", "驾校", "学校", "中心", "部", "科", "处", "物业", "站", "科技", "商贸", "物流",
                "家政", "装饰")
    assert all(n.endswith(suffixes) for n in names), [n for n in names if not n.endswith(suffixes)][:5]
    for sfx in ("分公司", "门店", "驾校", "培训学校", "住院部", "物业"):
        assert any(n.endswith(sfx) for n in names), sfx


def test_generator_deterministic_and_splits_held_apart(tmp_path):
    d = _tiny_templates(tmp_path)
    outs = []
    for k in range(2):
        out = tmp_path / f"out{k}"
        r = run("generate.py", "--out", str(out), "--templates", str(d), "--train-per-intent", "40",
                "--heldout-per-intent", "10", "--calib-per-intent", "5")
        assert r.returncode == 0, r.stderr
        outs.append({s: (out / f"{s}.jsonl").read_text(encoding="utf-8")
                     for s in ("train", "dev", "test", "calib")})
    assert outs[0] == outs[1]
    data = {s: [json.loads(l) for l in t.splitlines()] for s, t in outs[0].items()}
    keys = {s: {validate_key(e["text"]) for e in v} for s, v in data.items()}
    assert not keys["train"] & keys["dev"] and not keys["train"] & keys["test"]
    assert not keys["dev"] & keys["test"]
    for ex in data["dev"] + data["test"]:
        if ex["intent"] == "water_outage":
            assert ("发黄" in ex["text"]) != ("断水" in ex["text"])
            assert not re.search("停水|没水|水压低", ex["text"])
    # dev takes heldout template 1, test template 2.
    assert all("断水" not in e["text"] for e in data["dev"] if e["intent"] == "water_outage")
    assert all("发黄" not in e["text"] for e in data["test"] if e["intent"] == "water_outage")
    assert all(set(e) == {"text"} for e in data["calib"])
    r = run("validate.py", *(str(tmp_path / "out0" / f"{s}.jsonl") for s in ("dev", "test", "calib")))
    assert r.returncode == 0, r.stderr


def validate_key(text):
    return re.sub(r"[\s，。？！、；：,.?!;:…~]+", "", text)


def test_near_dup_report_counts_a_planted_copy(tmp_path):
    tr = [{"text": "朝阳区建国路88号停水了三天了怎么回事", "intent": "water_outage",
           "slots": [slot("district", 0, 3, "朝阳区建国路88号停水了三天了怎么回事")]},
          {"text": "我家楼上漏水渗到天花板上了", "intent": "house_leak_repair", "slots": []}]
    dv = [{"text": "海淀区建国路88号停水了三天了怎么回事", "intent": "water_outage",
           "slots": [slot("district", 0, 3, "海淀区建国路88号停水了三天了怎么回事")]},
          {"text": "电梯坏了没人修", "intent": "elevator_fault", "slots": []}]
    write_jsonl(tmp_path / "train.jsonl", tr)
    write_jsonl(tmp_path / "dev.jsonl", dv)
    rates, conflicts = near_dup.report(str(tmp_path), 0.6, 0, out=open(os.devnull, "w"))
    assert rates == {"dev": 0.5} and conflicts == 0


def test_label_consistency_finds_unlabelled_copies(tmp_path):
    t1, t2 = "我的会员卡退不了", "会员卡的钱不退"
    exs = [{"text": t1, "intent": "prepaid_card_refund", "slots": [slot("item", 2, 5, t1)]},
           {"text": t2, "intent": "prepaid_card_refund", "slots": []}]
    write_jsonl(tmp_path / "train.jsonl", exs)
    rows = label_consistency.report(str(tmp_path / "train.jsonl"), 1, 5, out=open(os.devnull, "w"))
    assert [(r[1], r[2], r[3]) for r in rows] == [(("item", "会员卡"), 1, 1)]


# ------------------------------------------------------------------ the shipped dataset

SPLITS = ["train", "dev", "test", "calib"]


def test_shipped_dataset_is_valid():
    files = [os.path.join(DATA, f"{s}.jsonl") for s in SPLITS + ["challenge"]]
    missing = [f for f in files if not os.path.exists(f)]
    assert not missing, f"dataset files missing: {missing}; run training/data_gen/generate.py"
    r = run("validate.py", *files)
    assert r.returncode == 0, r.stdout + r.stderr
    calib = open(files[3], encoding="utf-8").read().splitlines()
    assert len(calib) >= 1000


def test_shipped_dataset_is_what_the_generator_makes(tmp_path):
    r = run("generate.py", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    for s in SPLITS:
        with open(os.path.join(DATA, f"{s}.jsonl"), encoding="utf-8") as a, \
                open(tmp_path / f"{s}.jsonl", encoding="utf-8") as b:
            assert a.read() == b.read(), f"{s}.jsonl differs from a fresh generate.py run: regenerate"


def test_challenge_set_is_hand_written_and_held_apart():
    """data/hotline/challenge.jsonl is built from the hand-written challenge.src.tsv (no
    generator), covers every intent with at least 6 utterances, and is not a near-copy of train."""
    path = os.path.join(DATA, "challenge.jsonl")
    rows = [json.loads(l) for l in open(path, encoding="utf-8")]
    assert rows == challenge.build(os.path.join(DATA, "challenge.src.tsv")), \
        "challenge.jsonl differs from challenge.src.tsv: run training/data_gen/challenge.py"
    assert len(rows) >= 330
    counts = collections.Counter(r["intent"] for r in rows)
    assert set(counts) == set(TAX.intent_ids) and min(counts.values()) >= 6
    train = [json.loads(l) for l in open(os.path.join(DATA, "train.jsonl"), encoding="utf-8")]
    train_keys = {validate_key(r["text"]) for r in train}
    # Only very short replies (对对对, 人工) can coincide with a training text.
    assert not [r["text"] for r in rows
                if validate_key(r["text"]) in train_keys and len(validate_key(r["text"])) > 6]
    # Near-copies (masked 5-gram Jaccard, near_dup.py) among the utterances longer than a reply.
    write_jsonl_dir = {"train": train, "dev": [r for r in rows if len(validate_key(r["text"])) > 8]}
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for k, v in write_jsonl_dir.items():
            write_jsonl(os.path.join(d, f"{k}.jsonl"), v)
        rates, _ = near_dup.report(d, 0.6, 0, out=open(os.devnull, "w"))
    assert rates["dev"] <= 0.02, rates


def test_challenge_markup_parser():
    row = challenge.parse_line("water_outage\t[朝阳区](district)[建国路8号](address)停水 [北京](-)",
                               "x:1")
    assert row == {"text": "朝阳区建国路8号停水 北京", "intent": "water_outage",
                   "slots": [slot("district", 0, 3, "朝阳区建国路8号停水 北京"),
                             slot("address", 3, 8, "朝阳区建国路8号停水 北京")]}
    with pytest.raises(ValueError, match="x:2: unbalanced"):
        challenge.parse_line("greeting\t[你好(greeting)", "x:2")
    with pytest.raises(ValueError, match="expected intent<TAB>text"):
        challenge.parse_line("你好", "x:3")
