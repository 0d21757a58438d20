"""Slot-value pools for the hotline data generator (stdlib only, deterministic given an rng).

Every public `gen_*` function takes a random.Random and returns a list of segments
[(text, label_or_None), ...]; labelled segments become slots. Values are nationwide: districts of
cities in every province, roads, compounds, companies, names, plates of all 31 provinces.
Values never start or end with whitespace, punctuation or the particles 的/在/了/吗/呢/吧.
"""
from lexicon import (CITY_DISTRICTS, ROAD_STEMS, COMPOUND_STEMS, COMPOUND_SUFFIXES, TOWN_STEMS,
                     SURNAMES, COMPOUND_SURNAMES, GIVEN_CHARS, ORG_STEMS, INDUSTRIES,
                     FACTORY_KINDS, SHOP_KINDS, RESTAURANT_KINDS, SCHOOL_STEMS, TRAINING_KINDS,
                     TAXI_ORGS, BANKS, BUILDERS_REAL, DEVELOPERS_REAL, PROPERTY_REAL, GYM_KINDS,
                     LANDMARKS, ITEMS, ID_REGIONS, PLATE_PROVINCES,
                     PRODUCTS, FOODS, SHOP_CHAINS, RESTAURANT_CHAINS, GYM_CHAINS,
                     TRAINING_CHAINS)

DIGITS_ZH = "零一二三四五六七八九"


def chance(rng, p):
    return rng.random() < p


def pick(rng, seq):
    return seq[rng.randrange(len(seq))]


def num_zh(n):
    """Integer 0..99999999 in Chinese numerals as spoken (一百二十, 三千零五, 两万)."""
    if n == 0:
        return "零"
    units = ["", "十", "百", "千"]

    def four(x, lead):
        s, zero = "", False
        for i in (3, 2, 1, 0):
            d = (x // 10 ** i) % 10
            if d == 0:
                zero = bool(s)
                continue
            if zero:
                s += "零"
                zero = False
            if i == 1 and d == 1 and not s and lead:
                s += "十"
            else:
                s += DIGITS_ZH[d] + units[i]
        return s

    wan, rest = divmod(n, 10000)
    if wan:
        s = four(wan, True) + "万"
        if rest:
            s += ("零" if rest < 1000 else "") + four(rest, False)
    else:
        s = four(rest, True)
    # 二千/二万/二百 are usually said 两千/两万/两百 at the head of a number.
    if s.startswith("二") and len(s) > 1 and s[1] in "千万百":
        s = "两" + s[1:]
    return s


def spell_digits(s, rng, yao=0.7, dong=0.1):
    """Digit string read digit by digit: 1 -> 幺 (mostly) or 一, 0 -> 零 or 洞."""
    out = []
    for ch in s:
        if ch == "1":
            out.append("幺" if chance(rng, yao) else "一")
        elif ch == "0":
            out.append("洞" if chance(rng, dong) else "零")
        elif ch.isdigit():
            out.append(DIGITS_ZH[int(ch)])
        else:
            out.append(ch)
    return "".join(out)


def small_num(rng, n):
    """A building/room number said as digits or characters."""
    return str(n) if chance(rng, 0.7) else num_zh(n)


# ---------------------------------------------------------------- people, phones, ids

def person_name(rng):
    if chance(rng, 0.04):
        sur = pick(rng, COMPOUND_SURNAMES)
    else:
        sur = pick(rng, SURNAMES)
    given = pick(rng, GIVEN_CHARS)
    if chance(rng, 0.65):
        given += pick(rng, GIVEN_CHARS)
    return sur + given


MOBILE_PREFIXES = ["130", "131", "132", "133", "135", "136", "137", "138", "139", "150", "151",
                   "152", "153", "155", "156", "157", "158", "159", "166", "173", "176", "177",
                   "178", "180", "181", "182", "183", "185", "186", "187", "188", "189", "191",
                   "198", "199"]
AREA_CODES = ["010", "021", "022", "023", "020", "024", "025", "027", "028", "029", "0311", "0351",
              "0371", "0431", "0451", "0471", "0531", "0551", "0571", "0591", "0731", "0771",
              "0791", "0851", "0871", "0891", "0898", "0931", "0951", "0971", "0991", "0755"]


def phone(rng, kind=None):
    kind = kind or ("mobile" if chance(rng, 0.85) else "landline")
    if kind == "mobile":
        d = pick(rng, MOBILE_PREFIXES) + "".join(str(rng.randrange(10)) for _ in range(8))
        r = rng.random()
        if r < 0.62:
            return d
        if r < 0.72:
            return f"{d[:3]} {d[3:7]} {d[7:]}"
        if r < 0.77:
            return f"{d[:3]}-{d[3:7]}-{d[7:]}"
        s = spell_digits(d, rng)
        if chance(rng, 0.3):
            s = f"{s[:3]} {s[3:7]} {s[7:]}"
        return s
    area = pick(rng, AREA_CODES)
    local = str(rng.randrange(2, 9)) + "".join(str(rng.randrange(10)) for _ in range(7 if len(area) == 3 else 6 + rng.randrange(2)))
    r = rng.random()
    if r < 0.45:
        return area + "-" + local
    if r < 0.75:
        return area + local
    if r < 0.85:
        return area + " " + local
    return spell_digits(area, rng, yao=0.5) + spell_digits(local, rng, yao=0.5)


_ID_WEIGHTS = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
_ID_CHECK = "10X98765432"


def id_check_digit(first17):
    """GB 11643-1999 check character for the first 17 digits."""
    return _ID_CHECK[sum(int(c) * w for c, w in zip(first17, _ID_WEIGHTS)) % 11]


def id_number(rng):
    year = rng.randrange(1940, 2008)
    month = rng.randrange(1, 13)
    day = rng.randrange(1, 29)
    body = f"{pick(rng, ID_REGIONS)}{year:04d}{month:02d}{day:02d}{rng.randrange(1000):03d}"
    check = id_check_digit(body)
    if chance(rng, 0.08):  # some callers misread a digit: invalid ones exist in the wild
        check = pick(rng, [c for c in _ID_CHECK if c != check])
    full = body + check
    r = rng.random()
    if r < 0.72:
        return full if check != "X" or chance(rng, 0.8) else full[:-1] + "x"
    if r < 0.82:
        return f"{full[:6]} {full[6:14]} {full[14:]}"
    s = spell_digits(body, rng, yao=0.6) + ({"X": pick(rng, ["叉", "X", "埃克斯"])}.get(check) or spell_digits(check, rng))
    return s


# ---------------------------------------------------------------- places

ALL_DISTRICTS = [(c, d) for c, ds in CITY_DISTRICTS.items() for d in ds]
_DISTRICT_SET = {d for _, d in ALL_DISTRICTS}


def city_name(rng, city=None):
    city = city or pick(rng, list(CITY_DISTRICTS))
    # 大理市 / 喀什市 are also county-level districts: the city is said without 市 there, so a
    # string is never a district in one utterance and an unlabelled city in another.
    add = chance(rng, 0.4) and not city.endswith("州市") and city + "市" not in _DISTRICT_SET
    return city + ("市" if add else "")


def district(rng):
    return pick(rng, ALL_DISTRICTS)[1]


def road_name(rng):
    stem = pick(rng, ROAD_STEMS)
    r = rng.random()
    if r < 0.45:
        suf = "路"
    elif r < 0.55:
        suf = "大道"
    elif r < 0.65:
        suf = "街"
    elif r < 0.7:
        suf = "大街"
    elif r < 0.85:
        suf = pick(rng, ["东路", "西路", "南路", "北路", "中路", "一路", "二路", "三路"])
    elif r < 0.9:
        suf = pick(rng, ["南路三段", "北路二段", "东路一段", "中路四段"])
    elif r < 0.95:
        suf = pick(rng, ["巷", "胡同", "里"])
    else:
        suf = pick(rng, ["路", "街"]) + pick(rng, ["南一巷", "东二巷", "北三巷", "西巷"])
    return stem + suf


def house_number(rng):
    n = rng.choice([rng.randrange(1, 60), rng.randrange(1, 300), rng.randrange(1, 2000)])
    s = small_num(rng, n)
    if chance(rng, 0.06):
        return f"{s}弄"
    if chance(rng, 0.05):
        return f"{n}-{rng.randrange(1, 9)}号"
    return s + "号"


def compound_name(rng):
    r = rng.random()
    stem = pick(rng, COMPOUND_STEMS)
    if r < 0.8:
        name = stem + pick(rng, COMPOUND_SUFFIXES)
        if chance(rng, 0.12):
            name += pick(rng, ["一期", "二期", "三期", "东区", "西区", "南区", "北区"])
        return name
    if r < 0.9:
        return pick(rng, ORG_STEMS) + pick(rng, ["厂宿舍", "家属院", "厂家属区", "小区"])
    return pick(rng, ROAD_STEMS) + pick(rng, ["社区", "新村", "里小区", "公寓"])


def building_part(rng):
    b = rng.randrange(1, 40)
    r = rng.random()
    if r < 0.08:
        parts = [pick(rng, "ABCDE") + "座"]
    elif r < 0.14:
        parts = [num_zh(rng.randrange(1, 6)) + "区" + small_num(rng, b) + pick(rng, ["栋", "号楼"])]
    else:
        parts = [small_num(rng, b) + pick(rng, ["号楼", "栋", "幢", "号楼", "栋"])]
    if chance(rng, 0.6):
        parts.append(small_num(rng, rng.randrange(1, 7)) + ("门" if chance(rng, 0.1) else "单元"))
    if chance(rng, 0.7):
        room = rng.randrange(1, 33) * 100 + rng.randrange(1, 7)
        r = rng.random()
        if r < 0.55:
            parts.append(str(room) + pick(rng, ["", "", "室", "房"]))
        elif r < 0.8:
            parts.append(spell_digits(str(room), rng, yao=0.6, dong=0.3))
        else:
            parts.append(num_zh(room) + "室")
    return "".join(parts)


def _street_office(rng):
    """Sometimes a caller names the 街道/镇 before the compound (望京街道花家地小区)."""
    if chance(rng, 0.07):
        return pick(rng, TOWN_STEMS + ROAD_STEMS) + pick(rng, ["街道", "镇", "街道办"])
    return ""


def address(rng, variant=None):
    if variant is None:
        variant = rng.choices(["road", "compound", "building", "road_compound", "village",
                               "landmark", "crossing", "street"],
                              [28, 18, 22, 9, 7, 8, 5, 3])[0]
    if variant == "road":
        return road_name(rng) + house_number(rng)
    if variant == "street":
        return road_name(rng)
    if variant == "compound":
        name = _street_office(rng) + compound_name(rng)
        if chance(rng, 0.35):
            name += small_num(rng, rng.randrange(1, 30)) + pick(rng, ["号楼", "栋", "幢"])
        return name
    if variant == "building":
        return _street_office(rng) + compound_name(rng) + building_part(rng)
    if variant == "road_compound":
        if chance(rng, 0.2):  # Beijing style: 建国路88号院3号楼
            return road_name(rng) + str(rng.randrange(1, 300)) + "号院" + building_part(rng)
        s = road_name(rng) + house_number(rng) + compound_name(rng)
        return s + (building_part(rng) if chance(rng, 0.4) else "")
    if variant == "village":
        r = rng.random()
        if r < 0.5:
            return (pick(rng, TOWN_STEMS) + pick(rng, ["镇", "乡"]) + pick(rng, SURNAMES) + "家"
                    + pick(rng, ["村", "庄", "湾"]) + (num_zh(rng.randrange(1, 12)) + "组" if chance(rng, 0.5) else ""))
        if r < 0.8:
            return pick(rng, TOWN_STEMS) + "村" + num_zh(rng.randrange(1, 10)) + "组"
        return pick(rng, TOWN_STEMS) + "街道" + pick(rng, COMPOUND_STEMS) + "社区"
    if variant == "landmark":
        r = rng.random()
        if r < 0.25:
            n = rng.randrange(1, 12)
            return (f"地铁{small_num(rng, n)}号线{pick(rng, ROAD_STEMS)}{pick(rng, ['站', '路站'])}"
                    + (pick(rng, "ABCD") + "口" if chance(rng, 0.6) else ""))
        return pick(rng, LANDMARKS).replace("@", pick(rng, ROAD_STEMS))
    if variant == "crossing":
        a, b = road_name(rng), road_name(rng)
        while b[:2] == a[:2]:
            b = road_name(rng)
        return a + pick(rng, ["和", "与", "跟", ""]) + b + pick(rng, ["交叉口", "路口", "十字路口", "交口", "丁字路口"])
    raise ValueError(f"unknown address variant {variant!r}")


# Places that the address variants above rarely make: water, roads between towns, markets and
# yards, villages named without a town, institutions' buildings. Used only by train-time
# augmentation (train.py --aug-place), so that adding them leaves the generated splits unchanged.
_WATER = ["河", "江", "湖", "水库", "渠", "河沟", "塘", "河滩", "湿地公园"]
_YARDS = ["菜市场", "农贸市场", "批发市场", "夜市", "步行街", "物流园", "工业园", "开发区", "加油站",
          "汽车站", "客运站", "停车场", "体育馆", "大学城", "城中村", "棚户区", "百货大楼", "大厦",
          "商场", "公园", "广场", "码头", "货场", "砖厂", "采石场", "垃圾场", "中转站", "老街"]
_BUILDINGS = ["老干部楼", "家属楼", "宿舍楼", "职工宿舍", "家属院", "安置房", "还建房", "筒子楼"]
_WATER_PARTS = ["东段", "西段", "南段", "北段", "下游", "上游"]
_GATES = ["北门", "南门", "东门", "西口", "东口", "后门"]


def natural_place(rng):
    r = rng.random()
    stem = pick(rng, ROAD_STEMS + TOWN_STEMS + COMPOUND_STEMS)
    if r < 0.2:
        name = stem + pick(rng, _WATER) + (pick(rng, _WATER_PARTS) if chance(rng, 0.2) else "")
    elif r < 0.45:
        name = stem + pick(rng, _YARDS) + (pick(rng, _GATES) if chance(rng, 0.2) else "")
    elif r < 0.6:  # village or hamlet said on its own: 赵庄, 马家村, 上湾村, 柳树屯
        s = pick(rng, SURNAMES)
        name = pick(rng, [s + "庄", s + "家村", s + "家湾", s + "家坝", s + "家寨", s + "营",
                          pick(rng, ["上", "下", "前", "后", "东", "西"]) + pick(rng, ["湾", "河", "坪", "岗"]) + "村",
                          pick(rng, TOWN_STEMS) + "屯", pick(rng, TOWN_STEMS) + "村"])
    elif r < 0.72:  # roads between places: 绕城高速, 318国道, 二环高架
        name = pick(rng, ["绕城高速", "环城高速", "机场高速", "二环高架", "三环高架", "内环高架",
                          f"{rng.randrange(101, 330)}国道", f"省道S{rng.randrange(101, 330)}",
                          stem + "高速", stem + "大桥", stem + "隧道", stem + "立交"])
    elif r < 0.82:
        name = pick(rng, [stem, pick(rng, ["市", "县", "区"])]) + pick(rng, _BUILDINGS) if chance(rng, 0.5) \
            else pick(rng, ["铁路", "电力", "粮食局", "自来水公司", "供销社", "化肥厂", "纺织厂"]) + pick(rng, _BUILDINGS)
    else:
        name = pick(rng, ["人民医院", "中医院", "妇幼保健院", "实验小学", "第一中学", "人民公园",
                          "市民中心", "体育中心", "火车站", "高铁站", "汽车南站", "中心广场"])
        if chance(rng, 0.4):
            name = stem + name
    return name


# ---------------------------------------------------------------- time

DAYS_PAST = ["昨天", "前天", "今天", "大前天", "上周三", "上周五", "上个星期一", "上星期天", "上礼拜六",
             "这周二", "上个月十五号", "月初", "昨儿", "今儿", "前两天", "上个月底", "国庆节"]
PARTS = ["早上", "上午", "中午", "下午", "傍晚", "晚上", "夜里", "半夜", "凌晨"]
NIGHT_PARTS = ["晚上", "夜里", "半夜", "凌晨"]


def _clock(rng, part):
    hours = {"早上": (5, 9), "上午": (8, 12), "中午": (11, 14), "下午": (1, 6), "傍晚": (5, 8),
             "晚上": (7, 12), "夜里": (10, 13), "半夜": (11, 14), "凌晨": (1, 6)}.get(part, (1, 13))
    h = rng.randrange(*hours)
    h = (h - 1) % 12 + 1
    s = (str(h) if chance(rng, 0.2) else ("两" if h == 2 else num_zh(h))) + "点"
    return s + pick(rng, ["", "", "", "半", "多", "一刻", "二十"]) if not s[0].isdigit() else s + pick(rng, ["", "半", "多"])


def time_value(rng, variant=None):
    if variant is None:
        variant = rng.choices(["past", "night", "day", "recent", "date"], [40, 15, 10, 20, 15])[0]
    if variant == "past":
        day = pick(rng, DAYS_PAST)
        r = rng.random()
        if r < 0.3 and day not in ("今天", "今儿"):  # bare 今天 stays unlabelled, as in templates
            return day
        if r < 0.4:
            m, d = rng.randrange(1, 13), rng.randrange(1, 29)
            day = (f"{m}月{d}" if chance(rng, 0.6) else f"{num_zh(m)}月{num_zh(d)}") + pick(rng, ["号", "日"])
        part = pick(rng, PARTS)
        if r < 0.65:
            return day + part
        if chance(rng, 0.06):
            h = rng.randrange(1, 24)
            return day + f"{h}:{pick(rng, ['00', '30', '15', '45'])}"
        return day + part + _clock(rng, part)
    if variant == "night":
        part = pick(rng, NIGHT_PARTS)
        r = rng.random()
        if r < 0.15:
            return pick(rng, ["昨天晚上", "昨天半夜", "前天夜里", "昨晚", "前天晚上", "昨儿夜里",
                              "上周六晚上", "今天凌晨"])
        if r < 0.3:
            return (pick(rng, ["昨天", "前天", "昨儿", "今天", "周六", "上周末", "大前天"]) + part
                    + (_clock(rng, part) if chance(rng, 0.5) else ""))
        if r < 0.4:
            return str(rng.randrange(22, 24)) + "点" + pick(rng, ["", "多", "半"])
        return part + _clock(rng, part)
    if variant == "day":
        part = pick(rng, ["早上", "上午", "中午", "下午"])
        if chance(rng, 0.3):
            return pick(rng, ["今天", "昨天", "前天", "周一", "上周三"]) + part
        return part + _clock(rng, part)
    if variant == "recent":
        # Short, resolvable periods only; vague or habitual words (最近, 今年, 每天晚上) are not
        # labelled as time anywhere in the data.
        return pick(rng, ["这两天", "这几天", "前两天", "上个月", "这一周", "这个月", "上个月底",
                          "这个星期", "上周", "前几天", "上个礼拜", "这半个月", "去年", "上礼拜"])
    if variant == "future":
        r = rng.random()
        if r < 0.5:
            return pick(rng, ["明天", "后天", "下周一", "下个星期三", "下个月", "月底", "下周", "年底",
                              "这个周末", "明年", "过两天", "国庆节"])
        part = pick(rng, ["上午", "下午", "早上", "晚上"])
        return pick(rng, ["明天", "后天", "下周二", "周五"]) + part + (_clock(rng, part) if chance(rng, 0.4) else "")
    if variant == "date":
        m, d = rng.randrange(1, 13), rng.randrange(1, 29)
        r = rng.random()
        if r < 0.25:
            return f"{m}月{d}" + pick(rng, ["号", "日"])
        if r < 0.5:
            return f"{num_zh(m)}月{num_zh(d)}" + pick(rng, ["号", "日"])
        if r < 0.65:
            y = rng.randrange(2018, 2027)
            return f"{y}年{m}月" + (f"{d}日" if chance(rng, 0.4) else "")
        if r < 0.75:
            y = rng.randrange(2018, 2027)
            return "二" + "".join(DIGITS_ZH[int(c)].replace("零", "〇") for c in str(y)[1:]) + "年" + num_zh(m) + "月"
        if r < 0.9:
            return pick(rng, ["去年", "今年", "前年"]) + num_zh(m) + "月" + pick(rng, ["", "份"])
        return f"{num_zh(d)}号"
    raise ValueError(f"unknown time variant {variant!r}")


# ---------------------------------------------------------------- organisations

def company(rng):
    stem = pick(rng, ORG_STEMS)
    if chance(rng, 0.2):  # registered names carry the city, with or without 市
        stem = pick(rng, list(CITY_DISTRICTS)) + ("市" if chance(rng, 0.35) else "") + stem
    return stem + pick(rng, INDUSTRIES) + pick(rng, ["有限公司", "有限公司", "有限责任公司", "公司", "集团",
                                                  "股份有限公司"])


def shop(rng):
    r = rng.random()
    if r < 0.15:
        return pick(rng, SHOP_CHAINS)
    if r < 0.3:
        return pick(rng, SURNAMES) + pick(rng, ["记", "姐", "哥", "氏", "家"]) + pick(rng, SHOP_KINDS)
    return pick(rng, ORG_STEMS) + pick(rng, SHOP_KINDS)


def restaurant(rng):
    r = rng.random()
    if r < 0.15:
        return pick(rng, RESTAURANT_CHAINS)
    if r < 0.4:
        return pick(rng, ["老", "小"]) + pick(rng, SURNAMES) + pick(rng, RESTAURANT_KINDS)
    if r < 0.6:
        return pick(rng, SURNAMES) + "记" + pick(rng, RESTAURANT_KINDS)
    return pick(rng, ORG_STEMS + COMPOUND_STEMS) + pick(rng, RESTAURANT_KINDS)


def school(rng):
    place = pick(rng, SCHOOL_STEMS + [d[:-1] for _, d in ALL_DISTRICTS[::7] if len(d) > 2])
    r = rng.random()
    if r < 0.3:
        return place + "第" + num_zh(rng.randrange(1, 30)) + pick(rng, ["中学", "小学", "初级中学"])
    return place + pick(rng, ["实验小学", "中心小学", "小学", "中学", "实验中学", "外国语学校", "幼儿园",
                              "中心幼儿园", "职业技术学校", "高级中学", "九年制学校"])


def training(rng):
    if chance(rng, 0.15):
        return pick(rng, TRAINING_CHAINS)
    return pick(rng, ORG_STEMS + SCHOOL_STEMS) + pick(rng, TRAINING_KINDS)


def hospital(rng):
    r = rng.random()
    city = pick(rng, list(CITY_DISTRICTS))
    if r < 0.3:
        return city + "市第" + num_zh(rng.randrange(1, 8)) + "人民医院"
    if r < 0.5:
        return city + pick(rng, ["市中医院", "市人民医院", "市妇幼保健院", "市中心医院", "市儿童医院",
                                 "中西医结合医院", "第一医院", "骨科医院", "口腔医院", "眼科医院"])
    if r < 0.7:
        return pick(rng, ALL_DISTRICTS)[1] + pick(rng, ["人民医院", "中医院", "妇幼保健院", "第二人民医院"])
    if r < 0.85:
        return pick(rng, COMPOUND_STEMS + ROAD_STEMS) + pick(rng, ["社区卫生服务中心", "卫生院", "社区医院", "诊所"])
    return pick(rng, ORG_STEMS) + pick(rng, ["医院", "口腔诊所", "口腔医院", "眼科医院", "骨科医院", "中医门诊部"])


def property_company(rng):
    if chance(rng, 0.2):
        return pick(rng, PROPERTY_REAL)
    return pick(rng, ORG_STEMS + COMPOUND_STEMS) + pick(rng, ["物业", "物业公司", "物业管理有限公司", "物业服务有限公司", "物管"])


def builder(rng):
    if chance(rng, 0.25):
        return pick(rng, BUILDERS_REAL)
    return pick(rng, ORG_STEMS) + pick(rng, ["建筑工程有限公司", "建设集团", "建工集团", "市政工程公司", "路桥公司",
                                             "建筑公司", "建设工程有限公司", "施工队"])


def developer(rng):
    if chance(rng, 0.3):
        return pick(rng, DEVELOPERS_REAL)
    return pick(rng, ORG_STEMS) + pick(rng, ["房地产开发有限公司", "置业有限公司", "地产", "房地产公司", "置业"])


def taxi(rng):
    if chance(rng, 0.3):
        return pick(rng, ORG_STEMS) + pick(rng, ["出租汽车公司", "出租车公司", "客运公司"])
    return pick(rng, TAXI_ORGS)


def gym(rng):
    if chance(rng, 0.12):
        return pick(rng, GYM_CHAINS)
    return pick(rng, ORG_STEMS + COMPOUND_STEMS) + pick(rng, GYM_KINDS)


def factory(rng):
    if chance(rng, 0.15):
        return pick(rng, list(CITY_DISTRICTS)) + ("市" if chance(rng, 0.4) else "") + \
            pick(rng, ORG_STEMS) + pick(rng, FACTORY_KINDS)
    return pick(rng, ORG_STEMS) + pick(rng, FACTORY_KINDS)


def organization(rng, variant=None):
    if variant is None:
        variant = rng.choices(["company", "shop", "restaurant", "school", "hospital", "property",
                               "factory", "gym", "bank"], [30, 15, 10, 8, 8, 10, 8, 6, 5])[0]
    if variant == "employer":
        variant = rng.choices(["company", "factory", "restaurant", "shop", "builder"], [45, 20, 15, 10, 10])[0]
    if variant == "branch":
        return branch(rng)
    fn = {"company": company, "shop": shop, "restaurant": restaurant, "school": school,
          "training": training, "hospital": hospital, "property": property_company,
          "taxi": taxi, "builder": builder, "developer": developer, "gym": gym,
          "factory": factory, "bank": lambda r: pick(r, BANKS)}.get(variant)
    if fn is None:
        raise ValueError(f"unknown organization variant {variant!r}")
    return fn(rng)


BRANCH_PLACES = ["万达", "吾悦", "人民路", "火车站", "解放路", "新区", "城东", "城西", "高新区", "大学城", "步行街",
                 "中山路", "滨江", "开发区", "东门", "南湖", "银泰", "龙湖天街"]


def branch(rng):
    """Organisation names in the forms callers use for a branch, outlet or department (data v5):
    XX分公司, XX店/门店, XX驾校, XX培训学校, a hospital's 住院部/急诊科, short chain names."""
    r = rng.random()
    if r < 0.15:
        return pick(rng, ORG_STEMS) + pick(rng, INDUSTRIES) + "有限公司" + pick(rng, BRANCH_PLACES) + "分公司"
    if r < 0.3:
        return pick(rng, SHOP_CHAINS + RESTAURANT_CHAINS + GYM_CHAINS) + pick(rng, BRANCH_PLACES) + \
            pick(rng, ["店", "门店", "分店", "旗舰店"])
    if r < 0.42:
        return pick(rng, ORG_STEMS) + pick(rng, ["驾校", "驾驶培训学校", "汽车驾驶学校"])
    if r < 0.54:
        return pick(rng, ORG_STEMS + SCHOOL_STEMS) + pick(rng, ["培训学校", "教育培训中心", "文化培训学校", "艺术学校"])
    if r < 0.66:
        return pick(rng, list(CITY_DISTRICTS)) + pick(rng, ["市人民医院", "市第一人民医院", "市中医院", "市中心医院",
                                                            "妇幼保健院", "医院"]) + \
            pick(rng, ["住院部", "急诊科", "门诊部", "儿科", "骨科", "收费处"])
    if r < 0.78:
        return pick(rng, ORG_STEMS + COMPOUND_STEMS) + pick(rng, ["物业", "物业服务中心", "物业管理处"])
    if r < 0.9:
        return pick(rng, ORG_STEMS) + pick(rng, ["", "", "市"]) + pick(rng, ["分公司", "营业部", "服务站", "门店", "专卖店"])
    return pick(rng, ORG_STEMS) + pick(rng, ["科技", "商贸", "物流", "家政", "装饰"])


SPOKEN_AMOUNTS_FIXED = ["块把钱", "百把块钱", "千把块钱", "一万二", "两千五", "1.5万", "2.8万", "3.6万元", "一万五千来块"]


def spoken_amount(rng):
    """Money the way callers say it (data v5): 两千五, 三千来块, 一万二, 八百多, 五六百块钱, 1.5万,
    四百八十八元, 块把钱."""
    r = rng.random()
    if r < 0.12:
        return pick(rng, SPOKEN_AMOUNTS_FIXED)
    if r < 0.3:  # 两千五, 三千八, 一万二 (no unit)
        big = rng.choice([("千", 1000), ("万", 10000), ("百", 100)])
        head = rng.randrange(1, 10)
        hz = "两" if head == 2 else num_zh(head)
        return hz + big[0] + num_zh(rng.randrange(1, 10)) + pick(rng, ["", "", "块", "块钱"])
    if r < 0.45:  # 三千来块, 八百多, 两万多
        head = rng.randrange(1, 10)
        hz = "两" if head == 2 else num_zh(head)
        return hz + pick(rng, ["百", "千", "万"]) + pick(rng, ["来块", "多", "多块", "来块钱", "多块钱"])
    if r < 0.6:  # 五六百块钱, 三四千
        a = rng.randrange(1, 9)
        return num_zh(a) + num_zh(a + 1) + pick(rng, ["十", "百", "千", "万"]) + pick(rng, ["块钱", "块", "", "元"])
    if r < 0.72:  # 1.5万, 2.3万元
        return f"{rng.randrange(1, 4)}.{rng.randrange(1, 10)}万" + pick(rng, ["", "", "元", "块"])
    if r < 0.86:  # 四百八十八元, 一千二百九十九块
        n = rng.choice([rng.randrange(100, 1000), rng.randrange(1000, 10000)])
        return num_zh(n) + pick(rng, ["元", "块", "块钱"])
    n = rng.choice([rng.randrange(99, 1000), rng.randrange(1000, 30000)])
    return str(n) + pick(rng, ["元", "块", "块钱"])


# ---------------------------------------------------------------- vehicles, money, ids

PLATE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"


def plate_number(rng):
    prov = pick(rng, PLATE_PROVINCES)
    letter = pick(rng, PLATE_LETTERS[:12]) if chance(rng, 0.7) else pick(rng, PLATE_LETTERS)
    if chance(rng, 0.15):
        tail = pick(rng, "DF") + "".join(str(rng.randrange(10)) for _ in range(5))
    else:
        chars = [str(rng.randrange(10)) for _ in range(5)]
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            chars[rng.randrange(5)] = pick(rng, PLATE_LETTERS)
        tail = "".join(chars)
    r = rng.random()
    if r < 0.78:
        return prov + letter + tail
    if r < 0.84:
        return prov + letter.lower() + tail.lower()
    if r < 0.9:
        return prov + letter + " " + tail
    return prov + letter + spell_digits(tail, rng, yao=0.8, dong=0.4)


def bus_line(rng):
    n = rng.choice([rng.randrange(1, 30), rng.randrange(1, 200), rng.randrange(100, 999)])
    r = rng.random()
    if r < 0.55:
        return f"{n}路"
    if r < 0.65:
        return spell_digits(str(n), rng, yao=0.5) + "路" if n >= 100 else num_zh(n) + "路"
    if r < 0.75:
        return pick(rng, "KBYMG") + f"{rng.randrange(1, 80)}路"
    if r < 0.83:
        return pick(rng, ["夜", "夜班", "游", "专线", "快速", "高峰"]) + f"{rng.randrange(1, 40)}路"
    if r < 0.9:
        return f"BRT{rng.randrange(1, 12)}号线"
    if r < 0.95:
        return pick(rng, ["旅游", "社区巴士", "机场大巴", "定制公交"]) + f"{rng.randrange(1, 15)}" + pick(rng, ["线", "号线", "路"])
    return f"{n}路" + pick(rng, ["区间", "支线", "快线"])


def amount(rng, variant=None):
    if variant is None:
        variant = rng.choices(["small", "mid", "large"], [30, 45, 25])[0]
    if variant == "small":
        n = rng.choice([rng.randrange(10, 100), rng.randrange(1, 10) * 100 + rng.choice([0, 0, 50]), rng.randrange(100, 1000)])
    elif variant == "mid":
        n = rng.choice([rng.randrange(1, 10) * 1000 + rng.choice([0, 0, 500, 200]), rng.randrange(1000, 10000)])
    elif variant == "fare":  # taxi and bus fares: a few yuan to a few hundred
        n = rng.choice([rng.randrange(8, 60), rng.randrange(20, 150), rng.randrange(2, 40) * 10])
    elif variant == "spoken":
        return spoken_amount(rng)
    elif variant == "large":
        n = rng.choice([rng.randrange(1, 30) * 10000, rng.randrange(10, 100) * 1000,
                        rng.randrange(100, 5000) * 100])
    else:
        raise ValueError(f"unknown amount variant {variant!r}")
    unit = pick(rng, ["元", "元", "块", "块钱", "块钱"])
    r = rng.random()
    if r < 0.4:
        s = str(n)
    else:
        s = num_zh(n)
    if n % (100 if n >= 1000 else 10) == 0 and chance(rng, 0.25):
        s += "多"
        if unit == "元":
            unit = "块"
    return s + unit


def order_id(rng):
    m, d = rng.randrange(1, 13), rng.randrange(1, 29)
    s = f"GD{rng.choice([2025, 2026, 2026])}{m:02d}{d:02d}{rng.randrange(1, 1000):03d}"
    if chance(rng, 0.1):
        s += str(rng.randrange(10))
    r = rng.random()
    if r < 0.75:
        return s
    if r < 0.85:
        return s.lower()
    if r < 0.92:
        return s[:2] + " " + s[2:6] + " " + s[6:]
    return s[:2] + spell_digits(s[2:], rng, yao=0.5, dong=0.2)


def item(rng):
    return pick(rng, ITEMS)


_PRODUCT_SET, _FOOD_SET = set(PRODUCTS), set(FOODS)


def widen_item(values, rng):
    """An inline item list of products (or foods) only: half of the time a value of the whole
    shared vocabulary instead, so templates do not teach a handful of words per intent."""
    if chance(rng, 0.5):
        if all(v in _PRODUCT_SET for v in values):
            return pick(rng, PRODUCTS)
        if all(v in _FOOD_SET for v in values):
            return pick(rng, FOODS)
    return pick(rng, values)


def duration(rng):
    return pick(rng, ["三个月", "半年", "半年多", "好几天", "一个多月", "两个礼拜", "一年多", "好几个月",
                      "三四天", "一个星期", "十来天", "两年", "大半年", "五六年", "二十多天", "几个月"])
