"""ASR-style augmentation of labelled segments; labelled spans are never edited.

An utterance is a list of (text, label_or_None) segments. Every operation edits only unlabelled
segments or adds unlabelled segments between/around them, so slot values stay intact and offsets
are recomputed exactly when the segments are joined (`to_example`).
"""
import re

import pools
from pools import chance, pick

PUNCT = "，。？！、；：,.?!;:…~"
_PUNCT_RE = re.compile(f"[{re.escape(PUNCT)}]+")

GREETINGS = ["喂", "喂你好", "你好", "您好", "喂喂", "哎你好", "喂是12345吗", "你好请问是12345吗",
             "喂您好", "喂，你好", "你好你好", "哎喂"]
POLITE = ["麻烦问一下", "打扰一下", "同志你好", "您好麻烦您", "不好意思打扰了", "劳驾问一下",
          "你好，想请你们帮个忙", "请问一下", "您好，我想咨询个事"]
ELDERLY = ["姑娘啊", "小伙子", "我说姑娘", "闺女啊我跟你说", "我是个老头子不太懂这些",
           "我年纪大了不会弄手机", "我老太婆耳朵不好你说大声点", "小同志啊", "我都七十多了"]
ANGRY = ["我真是受够了", "你们到底管不管事", "我已经打了好几次电话了", "我今天必须要个说法",
         "气死我了", "你们这办事效率也太低了吧", "投诉！", "我要投诉"]
OPENERS = ["嗯", "那个", "呃", "就是", "是这样的", "我想问一下", "我想反映个事情", "我跟你说啊",
           "你好我想咨询一下", "我想问问", "就是说", "是这样子的啊", "我说一下"]
SUFFIX_ANSWER = ["谢谢", "谢谢啊", "麻烦你了", "帮我查查", "你给我说说", "好吧", "我不太懂",
                 "麻烦讲清楚点", "谢谢你啊姑娘", "能告诉我吗", "我搞不明白"]
SUFFIX_DISPATCH = ["谢谢", "麻烦尽快处理", "麻烦你们快点", "快点来人吧", "帮帮忙", "拜托了",
                   "急死了", "就这个事", "你们赶紧管管", "我等你们回话", "谢谢啊辛苦了",
                   "行不行啊", "搞快点哦", "中不中", "给个说法", "尽快处理一下好吧"]
INNER = ["那个", "就是", "就是说", "嗯", "啊", "然后", "呃", "这个", "反正"]
PARTICLES = ["啊", "呀", "哦", "嘛", "哈", "呢"]
HOMOPHONES = [("在", "再"), ("再", "在"), ("的", "得"), ("得", "的"), ("的", "地"), ("哪", "那"),
              ("那", "哪"), ("做", "作"), ("已经", "以经"), ("账", "帐"), ("公积金", "公基金"),
              ("反映", "反应"), ("咨询", "资讯"), ("他", "她"), ("一下", "一哈"), ("现在", "线在"),
              ("师傅", "司傅"), ("办理", "半理"), ("停", "挺"), ("社保", "设保")]
REGIONAL = [("什么时候", "啥时候"), ("什么", "啥"), ("怎么办", "咋整"), ("怎么办", "咋办"),
            ("怎么", "咋"), ("没有", "莫得"), ("没有", "没得"), ("不知道", "不晓得"), ("知道", "晓得"),
            ("快点", "搞快点"), ("这里", "这块"), ("这里", "这儿"), ("那里", "那旮旯"),
            ("孩子", "娃"), ("多少钱", "好多钱"), ("为什么", "为啥"), ("干什么", "干啥"),
            ("很", "贼"), ("非常", "老"), ("不行", "不中"), ("是不是", "是莫是"),
            ("一点", "一丢丢"), ("现在", "这会儿"), ("今天", "今儿个"), ("昨天", "昨儿个")]
REPEATABLE = ["我", "就是", "那个", "这个", "你们", "我们", "他们", "它"]


def _free_indices(segs):
    return [i for i, (_, lab) in enumerate(segs) if lab is None]


def _sub_in_free(segs, rng, pairs):
    """Replaces one occurrence of one applicable pair inside an unlabelled segment."""
    cands = [(i, a, b) for i in _free_indices(segs) for a, b in pairs if a in segs[i][0]]
    if not cands:
        return segs
    i, a, b = pick(rng, cands)
    text = segs[i][0]
    starts = [m.start() for m in re.finditer(re.escape(a), text)]
    k = pick(rng, starts)
    segs[i] = (text[:k] + b + text[k + len(a):], None)
    return segs


def _insert_free(segs, rng, word):
    """Inserts `word` at a natural point: after punctuation, or at a segment boundary."""
    points = []  # (segment index, char offset) inside unlabelled segments
    for i in _free_indices(segs):
        text = segs[i][0]
        for m in re.finditer(f"[{re.escape(PUNCT)}]", text):
            points.append((i, m.end()))
        for m in re.finditer("(然后|就是|所以|但是|结果|现在|我想|我们)", text):
            # after a connective, or before 我想/我们 (not inside a word such as 就业)
            points.append((i, m.start() if m.group().startswith("我") else m.end()))
        if i < len(segs) - 1 and text and text[-1] not in "的了":
            points.append((i, len(text)))  # just before a slot: 在那个朝阳区
    if not points:
        return segs
    i, k = pick(rng, points)
    text = segs[i][0]
    segs[i] = (text[:k] + word + text[k:], None)
    return segs


def _repeat(segs, rng):
    cands = [(i, m.start(), m.group()) for i in _free_indices(segs)
             for m in re.finditer("|".join(REPEATABLE), segs[i][0])]
    if not cands:
        return segs
    i, k, w = pick(rng, cands)
    text = segs[i][0]
    segs[i] = (text[:k] + w + text[k:], None)
    return segs


def contact(rng, kind):
    """Contact details callers add at the end ("我叫…，电话…"): labelled name/phone segments."""
    name, phone = pools.person_name(rng), pools.phone(rng)
    forms = [
        [("我叫", None), (name, "person_name"), (pick(rng, ["，电话", "，电话是", "，手机"]), None),
         (phone, "phone")],
        [(pick(rng, ["联系电话", "我的电话是", "我手机号", "回电打"]), None), (phone, "phone")],
        [(name, "person_name"), ("，", None), (phone, "phone")],
        [("我的手机号是", None), (phone, "phone"), (pick(rng, ["，有事打这个电话", "，处理了回个电话", ""]), None)],
        [(pick(rng, ["我是", "我叫", "我姓名是"]), None), (name, "person_name")],
    ]
    if kind != "dispatch":
        forms = forms[4:] + [[("你们可以打我电话", None), (phone, "phone")],
                             [(pick(rng, ["我身份证号是", "身份证号码", "我的身份证"]), None),
                              (pools.id_number(rng), "id_number")]]
    return pick(rng, forms)


def augment(segs, rng, kind):
    """Returns augmented segments. kind: 'answer', 'dispatch' or 'dialog' (light)."""
    segs = list(segs)
    light = kind == "dialog"
    if rng.random() < (0.2 if light else 0.22):
        return _punct(segs, rng)  # some utterances stay as written
    if not light:
        if chance(rng, 0.08):
            segs = _sub_in_free(segs, rng, HOMOPHONES)
        if chance(rng, 0.15):
            segs = _sub_in_free(segs, rng, REGIONAL)
        if chance(rng, 0.25):
            for _ in range(1 + (chance(rng, 0.25))):
                segs = _insert_free(segs, rng, pick(rng, INNER))
        if chance(rng, 0.1):
            segs = _repeat(segs, rng)
        r = rng.random()
        prefix = None
        if r < 0.12:
            prefix = pick(rng, GREETINGS)
        elif r < 0.18:
            prefix = pick(rng, POLITE)
        elif r < 0.22:
            prefix = pick(rng, ELDERLY)
        elif r < 0.27 and kind == "dispatch":
            prefix = pick(rng, ANGRY)
        elif r < 0.42:
            prefix = pick(rng, OPENERS)
        if prefix:
            sep = "" if prefix[-1] in PUNCT else pick(rng, ["，", "，", "", " "])
            segs.insert(0, (prefix + sep, None))
        if chance(rng, 0.1 if kind == "dispatch" else 0.03):
            ends_punct = segs[-1][1] is None and segs[-1][0][-1:] in PUNCT
            segs.append(("" if ends_punct else pick(rng, ["，", "，", " ", "。"]), None))
            segs.extend(contact(rng, kind))
        if chance(rng, 0.18):
            suffix = pick(rng, SUFFIX_DISPATCH if kind == "dispatch" else SUFFIX_ANSWER)
            ends_punct = segs[-1][1] is None and segs[-1][0][-1:] in PUNCT
            segs.append(((("" if ends_punct else pick(rng, ["，", "，", "", "。"])) + suffix), None))
    else:
        if chance(rng, 0.15):
            segs.insert(0, (pick(rng, ["嗯", "那个", "呃", "喂", "啊"]) + pick(rng, ["，", ""]), None))
        if chance(rng, 0.05):
            segs = _repeat(segs, rng)
    if chance(rng, 0.08) and segs[-1][1] is None and segs[-1][0][-1:] not in "啊呀哦嘛哈呢吧吗":
        segs[-1] = (segs[-1][0].rstrip(PUNCT) + pick(rng, PARTICLES), None)
    return _punct(segs, rng)


def _punct(segs, rng):
    """ASR style: strip punctuation in most utterances, sometimes turn it into spaces."""
    r = rng.random()
    if r < 0.55:
        segs = [(_PUNCT_RE.sub("", t) if lab is None else t, lab) for t, lab in segs]
    elif r < 0.62:
        segs = [(_PUNCT_RE.sub(" ", t) if lab is None else t, lab) for t, lab in segs]
    return segs


def to_example(segs):
    """Joins segments into {"text", "slots"}; trims whitespace; exact code-point offsets."""
    segs = [(re.sub(r"\s+", " ", t) if lab is None else t, lab) for t, lab in segs]
    while segs and segs[0][1] is None and not segs[0][0].strip():
        segs.pop(0)
    while segs and segs[-1][1] is None and not segs[-1][0].strip():
        segs.pop()
    if segs and segs[0][1] is None:
        segs[0] = (segs[0][0].lstrip(), None)
    if segs and segs[-1][1] is None:
        segs[-1] = (segs[-1][0].rstrip(), None)
    text, slots, pos = [], [], 0
    for t, lab in segs:
        if lab is not None:
            slots.append({"type": lab, "start": pos, "end": pos + len(t), "value": t})
        text.append(t)
        pos += len(t)
    return {"text": "".join(text), "slots": slots}
