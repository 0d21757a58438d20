"""Mechanical labelling of closed-class slot values in unlabelled text, so that every split labels
them one way (the data-findings of 2026-12-01 found 身份证 labelled 226 times and left unlabelled
202 times in train, 上个月 labelled but 这个月 never, clock times labelled in some templates only).

Three classes are labelled wherever they occur outside a span, by the generator (after
augmentation, on the final segments) and checked by validate.py on every labelled file:

- item, closed class: cards and certificates (社保卡, 身份证, 居住证, 会员卡, 银行卡…) and named
  vaccines (流感疫苗, HPV疫苗…), longest match first. Not when the word names a number instead of
  the thing: followed by 号/号码/卡号 (身份证号), by 明 (居住证明), or directly by an id_number span
  (我的身份证330106…). Products (手机, 空调, 牛奶) are NOT in the closed class: they are the item
  only when they are what the call is about, which templates say with {item…}.
- time: calendar expressions that resolve relative to the call: 昨天/前天/明天/后天/大前天,
  上周三/这个礼拜/下个星期, 上个月/这个月/下个月/月底, 去年/前年/明年, 这两天/前几天, dates
  (3月15号, 二〇二五年十二月, 2024年), optionally followed by a part of the day and a clock time
  (昨天晚上十点多); a part of the day with a clock time (凌晨两点, 晚上十一点半); a clock time
  with 点半/点多/点钟 or a digit hour (23点). Not labelled: bare 今天/今儿 and 今年 (no part of day,
  clock or month after them), parts of the day alone (晚上, 半夜), habitual and vague words (每天,
  平时, 最近), durations (三个月, 好几天): the surrounding words stay outside the span (每天|早上五点).
  Not counts of people either: 几十号会员, 二十号人, 上百号工人 (a number + 号 + 人/会员/员工…, or
  after 几/百/千) are never time.
- amount: money said with a unit (3500元, 三千五百块, 两万多块钱, 九块九); not 一块 alone and not
  pieces of things (墙皮一块一块, 两块砖). Train labelled 710 such amounts and left 62 unlabelled.
"""
import re

from lexicon import FOODS, PRODUCTS

CARDS = [
    "第三代社保卡", "社会保障卡", "电子社保卡", "社保卡", "医保卡", "电子医保卡", "临时身份证", "电子身份证",
    "身份证", "电子居住证", "居住证", "暂住证", "会员卡", "储值卡", "预付卡", "充值卡", "购物卡", "健身年卡",
    "健身卡", "美容卡", "美发卡", "洗车卡", "游泳卡", "课时卡", "老年卡", "学生卡", "公交卡", "银行卡",
    "次卡", "年卡", "燃气卡", "驾驶证", "行驶证", "户口本", "户口簿", "结婚证", "离婚证", "房产证", "不动产证",
    "出生证明", "残疾证", "护照", "港澳通行证", "退休证", "就业创业证", "营业执照", "准生证",
]
VACCINES = [
    "九价HPV疫苗", "四价HPV疫苗", "二价HPV疫苗", "HPV疫苗", "九价疫苗", "四价疫苗", "二价疫苗", "流感疫苗",
    "狂犬疫苗", "肺炎疫苗", "带状疱疹疫苗", "乙肝疫苗", "甲肝疫苗", "水痘疫苗", "乙脑疫苗", "百白破疫苗",
    "麻腮风疫苗", "麻疹疫苗", "脊灰疫苗", "新冠疫苗", "手足口疫苗", "轮状病毒疫苗", "流脑疫苗",
]
ITEM_WORDS = sorted(set(CARDS + VACCINES), key=len, reverse=True)
_ITEM_RE = re.compile("|".join(re.escape(w) for w in ITEM_WORDS), re.IGNORECASE)
_ITEM_NOT_AFTER = re.compile(r"^(号|卡号|明)")
# In the calls about goods (PRODUCT_INTENTS) the product or food is what the call is about, so the
# shared vocabularies of lexicon.py are labelled there too, except inside a shop name (眼镜店).
PRODUCT_INTENTS = ("consumer_complaint", "food_safety", "price_fraud")
PRODUCT_WORDS = sorted(set(PRODUCTS + FOODS), key=len, reverse=True)
_PRODUCT_RE = re.compile("|".join(re.escape(w) for w in PRODUCT_WORDS))
_PRODUCT_NOT_AFTER = re.compile(r"^(号|店|铺|行|厂|城|摊|馆|公司|超市|市场|专卖|批发|柜台|机)")

_NUM = "[0-9０-９零〇一二两三四五六七八九十]"
_WEEKDAY = "[一二三四五六日天末]"
_POD = "(?:凌晨|早上|早晨|清早|上午|中午|下午|傍晚|晚上|夜里|半夜|深夜|午夜|夜间)"
_CLOCK = f"(?:{_NUM}{{1,3}}(?:点|:[0-5][0-9])(?:半|多|钟|一刻|三刻|{_NUM}{{1,2}}分?)?)"
_DAY = "(?:大前天|前天|昨天|明天|后天|昨儿个|昨儿|明儿个|明儿|前儿个|昨晚|今晚|今早|昨夜|当天晚上)"
_TODAY = "(?:今天|今儿个|今儿)"
_WEEK = (f"(?:(?:上|这|下|本)个?(?:周|星期|礼拜){_WEEKDAY}?|周{_WEEKDAY}|星期{_WEEKDAY}|"
         f"礼拜{_WEEKDAY})")
# 几十号人 / 二十号会员 / 上百号工人 count people, they are not dates: never time.
_HEADS = "(?:人|会员|员工|工人|职工|学生|家长|业主|住户|居民|同事|老人|客户|顾客|工友|兄弟|姐妹|农民工|村民|商户)"
_MONTH = (f"(?:(?:上|这|下)个月(?:底|初|中旬|{_NUM}{{1,3}}[号日])?|月底|月初|年底|年初"
          f"|国庆节|国庆|春节|元旦|中秋节|端午节|五一|{_NUM}{{1,3}}号(?![楼线院栋房室门口]|{_HEADS}))")
_YEAR = "(?:去年|前年|明年)"
_RECENT = "(?:这两天|前两天|前几天|这几天|过两天|这一周|这半个月)"
_YNUM = "(?:[12][0-9]{3}|二[〇零一二三四五六七八九]{3})年"
_DATE = (f"(?:(?:{_YNUM}|(?:去年|今年|前年|明年))?{_NUM}{{1,2}}月(?:份|{_NUM}{{1,3}}[号日])?"
         f"|{_YNUM})")
_ANCHOR = f"(?:{_DATE}|{_YEAR}|{_MONTH}|{_WEEK}|{_DAY}|{_RECENT})"
_TIME_RE = re.compile(
    f"(?:{_ANCHOR}(?:{_POD}{_CLOCK}?|{_CLOCK})?"      # 昨天 / 昨天晚上 / 昨天晚上十点 / 上周三8点
    f"|{_TODAY}(?:{_POD}{_CLOCK}?|{_CLOCK})"          # 今天上午 / 今天下午三点 (bare 今天 stays)
    f"|{_POD}{_CLOCK}"                                # 凌晨两点半
    f"|{_NUM}{{1,3}}点(?:半|多|钟)|[0-9]{{1,2}}点)")  # 十点半 / 23点
# A clock is not a clock inside 一点点 / 快一点 / 3点5公里; a month not inside 三个月 (has 个).
_TIME_BAD_BEFORE = re.compile(f"({_NUM}|[快慢大小早晚多少好轻近远声几百千])$")
_TIME_BAD_AFTER = re.compile(f"^({_NUM}|点|个|[0-9.]|公里|米|号楼|号线|栋|单元|岁|倍|块|元|次|万)")


_CNUM = "0-9零〇一二两三四五六七八九十百千万几"
_AMOUNT_RE = re.compile(
    f"(?<![{_CNUM}.])[{_CNUM}][{_CNUM}.]*多?(?:块钱|块|元|毛钱|万元|万块钱|万块)"
    f"(?:[一二三四五六七八九](?![{_CNUM}]))?")
_AMOUNT_NOT_AFTER = re.compile("^(一块|儿|去|走|地|砖|玻璃|布|肉|石|板|牌|屏|表|钱的事)")


def find_amounts(text):
    """[(start, end)] of money amounts said with a unit (3500元, 两万多块钱, 九块九); not 一块
    alone (一块去 = together) and not a piece of something (一块一块往下掉, 两块砖)."""
    out = []
    for m in _AMOUNT_RE.finditer(text):
        v = m.group()
        if v == "一块" or text.startswith("一块一块", m.start()) or \
                _AMOUNT_NOT_AFTER.match(text[m.end():]):
            continue
        out.append((m.start(), m.end()))
    return out


def find_items(text, products=False):
    """[(start, end)] of closed-class item words in a free text (before the id_number check);
    products: also the product and food words (PRODUCT_INTENTS)."""
    out = []
    for m in _ITEM_RE.finditer(text):
        if _ITEM_NOT_AFTER.match(text[m.end():]):
            continue
        out.append((m.start(), m.end()))
    if products:
        for m in _PRODUCT_RE.finditer(text):
            if not _PRODUCT_NOT_AFTER.match(text[m.end():]):
                out.append((m.start(), m.end()))
    return out


def find_times(text):
    """[(start, end)] of calendar time expressions in a free text."""
    out = []
    for m in _TIME_RE.finditer(text):
        s, e = m.start(), m.end()
        if s == e:
            continue
        if _TIME_BAD_BEFORE.search(text[:s]) and re.match(_NUM, text[s]):
            continue
        if _TIME_BAD_AFTER.match(text[e:]) and re.search(f"({_NUM}|点)$", text[s:e]):
            continue
        out.append((s, e))
    return out


def find(text, products=False):
    """[(start, end, type)] of closed-class values in a free text, non-overlapping, in order."""
    found = [(s, e, "item") for s, e in find_items(text, products)] + \
            [(s, e, "amount") for s, e in find_amounts(text)] + \
            [(s, e, "time") for s, e in find_times(text)]
    found.sort(key=lambda x: (x[0], -(x[1] - x[0])))
    out, last = [], 0
    for s, e, t in found:
        if s >= last:
            out.append((s, e, t))
            last = e
    return out


def label_segments(segs, products=False):
    """Labels closed-class values inside the unlabelled segments of [(text, label_or_None)];
    merges a time piece into a directly adjoining time span (昨天 + 晚上十点)."""
    out = []
    for k, (text, lab) in enumerate(segs):
        if lab is not None:
            out.append((text, lab))
            continue
        nxt = segs[k + 1][1] if k + 1 < len(segs) else None
        pos = 0
        for s, e, typ in find(text, products):
            if typ == "item" and nxt == "id_number" and re.fullmatch(r"[号码是：: ]*", text[e:]):
                continue  # 我的身份证330106…: the number, not the card
            if s > pos:
                out.append((text[pos:s], None))
            out.append((text[s:e], typ))
            pos = e
        if pos < len(text):
            out.append((text[pos:], None))
    merged = []
    for text, lab in out:
        if merged and lab == "time" and merged[-1][1] == "time":
            merged[-1] = (merged[-1][0] + text, "time")
        elif merged and lab is None and merged[-1][1] == "time" and _TAIL_RE.match(text):
            n = _TAIL_RE.match(text).end()  # {time:昨天}晚上十点: one span
            merged[-1] = (merged[-1][0] + text[:n], "time")
            if n < len(text):
                merged.append((text[n:], None))
        else:
            merged.append((text, lab))
    return merged


_TAIL_RE = re.compile(f"(?:{_POD}{_CLOCK}?|{_CLOCK})(?!{_NUM}|个|号楼|号线|栋|单元)")


def unlabelled(text, spans, products=False):
    """Closed-class values of `text` that no span of `spans` [(start, end, type)] covers, and time
    pieces glued to the end of a time span (validate.py)."""
    covered = [False] * len(text)
    for s, e, typ in spans:
        if typ == "time" and _TAIL_RE.match(text[e:]) and not any(s2 == e for s2, _, _ in spans):
            return_tail = (e, e + _TAIL_RE.match(text[e:]).end(), "time")
            covered_tail = return_tail
            break
    else:
        covered_tail = None
    for s, e, _ in spans:
        for i in range(s, e):
            covered[i] = True
    out = []
    pos = 0
    while pos < len(text):
        if covered[pos]:
            pos += 1
            continue
        end = pos
        while end < len(text) and not covered[end]:
            end += 1
        for s, e, typ in find(text[pos:end], products):
            if typ == "item" and _followed_by_id_number(text, pos + e, spans):
                continue
            out.append((pos + s, pos + e, typ))
        pos = end
    if covered_tail:
        out.append(covered_tail)
    return sorted(set(out))


def _followed_by_id_number(text, end, spans):
    m = re.match(r"[号码是：: ]*", text[end:])
    nxt = end + m.end()
    return any(s == nxt and t == "id_number" for s, _, t in spans) and bool(re.match(r"[0-9零〇一二三四五六七八九幺洞]", text[nxt:nxt + 1]))
