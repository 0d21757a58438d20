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
              ("师傅", "司傅"), ("办理", "半理"), ("停", "挺"), ("社保", "设保"), ("物业", "无业"),
              ("电梯", "点梯"), ("小区", "小曲"), ("投诉", "投述"), ("报销", "报效"), ("工资", "公资"),
              ("医保", "一保"), ("低保", "地保"), ("户口", "户扣"), ("噪音", "燥音"), ("油烟", "有烟"),
              ("疫苗", "一苗"), ("城管", "成管"), ("退费", "退废"), ("暖气", "暖器"), ("漏水", "露水")]
REGIONAL = [("什么时候", "啥时候"), ("什么", "啥"), ("怎么办", "咋整"), ("怎么办", "咋办"),
            ("怎么", "咋"), ("没有", "莫得"), ("没有", "没得"), ("不知道", "不晓得"), ("知道", "晓得"),
            ("快点", "搞快点"), ("这里", "这块"), ("这里", "这儿"), ("那里", "那旮旯"),
            ("孩子", "娃"), ("多少钱", "好多钱"), ("为什么", "为啥"), ("干什么", "干啥"),
            ("很", "贼"), ("非常", "老"), ("不行", "不中"), ("是不是", "是莫是"),
            ("一点", "一丢丢"), ("现在", "这会儿"), ("今天", "今儿个"), ("昨天", "昨儿个"),
            ("什么", "啥子"), ("怎么", "咋个"), ("我们", "俺们"), ("我", "俺"), ("这个", "嘞个"),
            ("没有", "冇"), ("不要", "甭"), ("看看", "瞅瞅"), ("一下", "一下子"), ("找不到", "寻不着"),
            ("厉害", "凶"), ("吵", "闹"), ("家里", "屋头"), ("知道", "清楚"), ("可以", "得行"),
            ("下午", "后晌"), ("晚上", "夜里头"), ("孩子", "小孩子"), ("老人", "老年人")]
# Long calls: callers tell a story before the request and add a follow-up after it. Plain text
# (time words in it are labelled by autolabel like everywhere else).
BACKGROUND = ["我们这个小区住了二十多年了", "我是退休职工一个人住", "我家里有老人有小孩", "上个月就打过一次电话了说会处理到现在也没动静",
              "这个事情我已经反映好几次了", "我先说一下情况啊", "我是外地来打工的不太懂这边的规定",
              "我儿子在外地工作家里就我跟老伴两个人", "事情是这样的你听我慢慢说", "我也不想麻烦你们实在是没办法了",
              "社区也找了街道也找了都说不归他们管", "我打了好几遍才打进来", "我腿脚不方便出不了门",
              "我是替我妈打的她耳朵不好", "你们别嫌我话多啊", "我是个体户平时忙得很", "我刚下夜班",
              "前几天我在网上也留过言没人回", "我们几户人家商量好了由我来打这个电话", "我文化不高说不清楚你多担待",
              "这个问题不是一天两天了", "我憋了好久了今天一定要说", "我住这儿十几年了头一回碰到这种事",
              "我家孩子马上要中考了", "我老伴刚做完手术在家养着", "我在外地出差家里打电话跟我说的"]
FOLLOWUP_DISPATCH = ["你们能不能派个人来看看", "我就想要个明确的答复", "要是再不管我就找媒体了", "麻烦你记一下回头给我回个电话",
                     "还有就是上次那个事也一直没结果", "我都不知道该找谁了", "这事拖了好久了", "你们处理完了给我打个电话",
                     "我在家等着", "这个要多久能有结果啊", "我说清楚了吧你记下来没有", "别又是记一下就完了",
                     "这次一定要给我们解决", "我们全楼的人都有意见", "你们到底归不归管", "再这样下去要出事的"]
FOLLOWUP_ANSWER = ["需要带什么材料", "在网上能办吗", "要跑几趟啊", "你说慢一点我拿笔记一下", "是去社区还是去哪里办",
                   "要多长时间能办好", "要不要本人去", "能不能让家里人代办", "收不收费啊", "我就想问清楚别白跑一趟",
                   "上次问了一个说法这次又是一个说法", "你们网站上写得我看不懂"]
SECOND_TOPIC = ["还有个事我们楼下的路灯也坏了好久了", "另外我还想问问社保卡丢了怎么补", "顺便说一下小区门口老是有人乱停车",
                "还有啊我家那边垃圾也好几天没人收了", "对了上次反映的噪音问题也没人管", "另外公积金的事我下次再问你们",
                "还有就是我们那边晚上路灯不亮", "再一个就是物业电话老是打不通"]
TERSE = ["说个事", "问个事", "反映个问题", "问一下", "投诉个事", "有个事"]
DIALECT = ["喂 俺想问一下", "阿拉想问问", "我跟你讲哦", "老表我问下", "师傅我问个事", "嘞个事情是这样", "我同你讲",
           "喂 妹儿我问一哈", "我跟你嗦", "那啥我想问问", "俺们这儿有个事"]
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
        core = sum(len(t) for t, _ in segs)  # a story around a two-word request would be the
        if chance(rng, 0.14) and core >= 12:  # whole utterance: long calls only around real ones
            segs.insert(0, (pick(rng, BACKGROUND) + pick(rng, ["，", "，", "", " "]), None))
        r = rng.random()
        prefix = None
        if r < 0.03:
            prefix = pick(rng, TERSE)
        elif r < 0.07:
            prefix = pick(rng, DIALECT)
        elif r < 0.12:
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
        if chance(rng, 0.12) and core >= 12:  # a follow-up after the request, or a second topic
            extra = pick(rng, SECOND_TOPIC) if chance(rng, 0.25) else \
                pick(rng, FOLLOWUP_DISPATCH if kind == "dispatch" else FOLLOWUP_ANSWER)
            ends_punct = segs[-1][1] is None and segs[-1][0][-1:] in PUNCT
            segs.append(("" if ends_punct else pick(rng, ["，", "，", " ", "。"]), None))
            segs.append((extra, None))
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
