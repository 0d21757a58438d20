"""A generated vocabulary and a Unicode-heavy corpus for tokenizer parity tests and benchmarks.

Deterministic (seeded); no network. The vocabulary mixes special tokens, ASCII, ##-pieces, common
Chinese characters, English words and pieces, accented words, full-width forms, emoji, Hangul and
kana, so that WordPiece has real choices to make and [UNK] is not the only answer.
"""
import random

ZH = ("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面"
      "而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好"
      "应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命"
      "此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老"
      "头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即"
      "保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场"
      "身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律"
      "叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克"
      "何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满"
      "县局照参红细引听该铁价严龙飞朝阳区建国路工噪音施晚还扰民社保卡医报销公积金户口迁移身份证居住停燃气暖物业投诉")
EN_WORDS = ["hello", "world", "the", "call", "water", "power", "bus", "line", "road", "phone",
            "number", "un", "##aff", "##able", "##ing", "##s", "##ed", "##er", "help", "please",
            "Hello", "THE", "café", "naïve", "straße", "ß", "σίσυφος", "σισυφος", "ς", "σ",
            "istanbul", "ı", "i", "tiếng", "viet", "##nam", "gd", "##20", "2026", "138", "##00",
            "12", "##345", "##5678", "##12", "ok", "##ay", "wifi", "app", "id", "vip", "a", "an",
            "ng", "##ang", "##ström", "##strom", "ang", "mc", "##donald", "kfc", "x", "##x"]
OTHER = ["é", "##é", "è", "ü", "ö", "Å", "å", "ñ", "ç", "ø", "æ", "œ", "ﬁ", "ǆ", "ǅ",
         "１", "２", "３", "##３", "Ａ", "ａ", "，", "。", "！", "？", "、", "：", "；", "“", "”", "（",
         "）", "《", "》", "…", "—", "·", "￥", "😀", "❤", "##️", "🇨", "##🇳", "👍", "##🏻",
         "ᄒ", "##ᅡ", "##ᆫ", "한", "국", "カ", "##タ", "##カ", "##ナ", "あ", "い", "の", "豈",
         "𠀀", "①", "²", "½", "™", "°", "℃", "€", "£", "¥", "§", "±", "×", "÷", "α", "β", "γ",
         "д", "##а", "ж", "ع", "ש", "ก", "क", "ा", "##ा", "ी", "्", "ฺ", "\u0301", "##\u0301"]


def make_vocab():
    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    toks += [chr(c) for c in range(33, 127)]
    toks += ["##" + chr(c) for c in range(33, 127) if chr(c).isalnum()]
    seen = set(toks)
    for ch in ZH:
        if ch not in seen:
            toks.append(ch)
            seen.add(ch)
    for ch in ZH[:60]:
        toks.append("##" + ch)
    for w in EN_WORDS + OTHER:
        if w not in seen:
            toks.append(w)
            seen.add(w)
    toks.append("the")  # a repeated token: transformers keeps the last id
    return toks


PUNCT_ZH = "，。！？、：；“”（）《》…—·"
FULLWIDTH = [chr(c) for c in range(0xFF01, 0xFF5F)] + ["\u3000", "\uff61", "\uff76", "\uffe5"]
EMOJI = ["😀", "❤️", "👍🏻", "🇨🇳", "👨\u200d👩\u200d👧", "🤖", "☎", "✅", "🚌", "💧"]
CONTROL = ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\x85", "\u200b", "\u200d", "\ufeff", "\ufffd",
           "\ue000", "\u0378", "\u2028", "\u2029", "\u00a0", "\t", "\r", "\x0b", "\x0c", "\x1c",
           "\u180e", "\U000e0001", "\U0010fffd", "\u061c", "\u00ad"]
ACCENTS = ["café", "cafe\u0301", "CAFÉ", "naïve", "Ångström", "\u212bngstr\u00f6m", "Tiếng Việt",
           "ΣΊΣΥΦΟΣ", "İstanbul", "Straße", "ﬁnance", "ǅemal", "한국어", "한\u0301", "カタカナ",
           "豈", "\uf900\u0301", "𠀀", "e\u0301\u0323", "e\u0323\u0301", "a\u0308\u0304",
           "\u0301abc", "ḱ", "x\u0345\u0301", "\u1fef", "\u037e", "Ω\u2126", "K\u212a", "ᄒ\u1161\u11ab",
           "\u1100\u1161", "\u0ccb", "\u0cc6\u0cd5", "\u0915\u093c", "\u0929"]
SPECIAL = ["[CLS]", "[SEP]", "[UNK]", "[PAD]", "[MASK]", "[unk]", "[S\x00EP]", "[ SEP]", "[SEP"]
LATIN = ["hello", "Hello", "HELLO", "world", "unaffable", "calling", "water", "GD20261128001",
         "京A12345", "13812345678", "138-1234-5678", "3.5万", "1,200块", "wifi", "APP", "VIP", "ok",
         "okay", "McDonald's", "KFC", "x2", "don't", "e-mail", "a+b=c", "50%", "$100", "#12",
         "2026-11-28", "10:30", "user@example.com", "http://x.cn/a?b=1"]


def rand_zh(rng, n):
    return "".join(rng.choice(ZH) if rng.random() > 0.12 else rng.choice(PUNCT_ZH)
                   for _ in range(n))


def rand_cp(rng):
    while True:
        r = rng.random()
        if r < 0.5:
            cp = rng.randrange(0x80, 0x3000)
        elif r < 0.8:
            cp = rng.randrange(0x3000, 0x10000)
        else:
            cp = rng.randrange(0x10000, 0x30000)
        if not (0xD800 <= cp <= 0xDFFF) and cp != 0x0A:
            return chr(cp)


KINDS = ["zh", "mixed", "fullwidth", "emoji", "control", "accents", "long", "special", "random"]


def kind_of(i):
    """The kind of make_corpus()'s i-th string."""
    return KINDS[i % len(KINDS)]


def make_corpus(n=5200, seed=12345):
    """n strings without '\\n' (one per line for `hotline tokenize`)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = kind_of(i)
        parts = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if kind == "zh" or r < 0.3:
                parts.append(rand_zh(rng, rng.randint(1, 20)))
            elif kind == "mixed":
                parts.append(rng.choice(LATIN))
            elif kind == "fullwidth":
                parts.append("".join(rng.choice(FULLWIDTH) for _ in range(rng.randint(1, 8))))
            elif kind == "emoji":
                parts.append(rng.choice(EMOJI))
            elif kind == "control":
                parts.append(rng.choice(CONTROL) + rng.choice(LATIN + ACCENTS))
            elif kind == "accents":
                parts.append(rng.choice(ACCENTS))
            elif kind == "long":
                base = rng.choice(["a", "é", "e\u0301", "x", "1", "ab", "hello", "ＡＢ"])
                k = rng.choice([49, 50, 51, 99, 100, 101, 150])
                parts.append((base * k)[: k + rng.randint(0, 2)])
            elif kind == "special":
                parts.append(rng.choice(SPECIAL))
            else:
                parts.append("".join(rand_cp(rng) for _ in range(rng.randint(1, 12))))
        sep = rng.choice(["", " ", "  ", "\t", "\u3000", "，"])
        out.append(sep.join(parts) if rng.random() < 0.9 else " " + sep.join(parts) + " ")
    return out


def fold_width(text):
    return "".join(chr(ord(c) - 0xFEE0) if 0xFF01 <= ord(c) <= 0xFF5E else
                   (" " if c == "\u3000" else c) for c in text)
