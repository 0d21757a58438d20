"""Template files: parsing and expansion into labelled segments. Syntax: TEMPLATES.md.

A template line parses to a sequence of nodes:
  ("text", str)                 literal text
  ("slot", label, variant, values)   `{label}`, `{label/variant}`, `{label:v1|v2}` (values list)
  ("macro", name)               `{place}`, `{_city}`, `{_duration}`
  ("alt", [seq, seq, ...])      `[a|b|]`, options may nest and contain slots
Expansion yields a list of (text, label_or_None) segments.
"""
import os

import pools

SLOT_VARIANTS = {
    "person_name": {None},
    "phone": {None, "mobile", "landline"},
    "id_number": {None},
    "district": {None},
    "address": {None, "road", "compound", "building", "crossing", "street", "village", "landmark"},
    "time": {None, "past", "night", "day", "future", "date", "recent"},
    "organization": {None, "company", "employer", "shop", "restaurant", "school", "training",
                     "hospital", "property", "taxi", "builder", "developer", "bank", "gym",
                     "factory", "branch"},
    "plate_number": {None},
    "bus_line": {None},
    "amount": {None, "small", "large", "fare", "spoken"},
    "order_id": {None},
    "item": {None},
}
MACROS = {"place", "home", "_city", "_duration"}
FORBIDDEN_EDGE = set("的在了吗呢吧") | set("，。？！、；：,.?!;: \t\"'“”‘’（）()")


class TemplateError(ValueError):
    pass


def _parse_seq(s, i, where, stop):
    """Parses from s[i] until a char in `stop` (or end); returns (nodes, index of stop char)."""
    nodes, buf = [], []
    while i < len(s) and s[i] not in stop:
        c = s[i]
        if c == "{":
            j = s.find("}", i)
            if j < 0:
                raise TemplateError(f"{where}: unclosed '{{' at column {i + 1}")
            if buf:
                nodes.append(("text", "".join(buf)))
                buf = []
            nodes.append(_parse_slot(s[i + 1:j], where))
            i = j + 1
        elif c == "[":
            if buf:
                nodes.append(("text", "".join(buf)))
                buf = []
            options = []
            i += 1
            while True:
                seq, i = _parse_seq(s, i, where, "|]")
                options.append(seq)
                if i >= len(s):
                    raise TemplateError(f"{where}: unclosed '['")
                if s[i] == "]":
                    i += 1
                    break
                i += 1  # '|'
            nodes.append(("alt", options))
        elif c in "}]|":
            raise TemplateError(f"{where}: unexpected {c!r} at column {i + 1}")
        else:
            buf.append(c)
            i += 1
    if buf:
        nodes.append(("text", "".join(buf)))
    return nodes, i


def _parse_slot(body, where):
    if body in MACROS:
        return ("macro", body)
    if ":" in body:
        label, rest = body.split(":", 1)
        values = rest.split("|")
        if label not in SLOT_VARIANTS:
            raise TemplateError(f"{where}: unknown slot type {label!r} in {{{body}}}")
        for v in values:
            if not v or v[0] in FORBIDDEN_EDGE or v[-1] in FORBIDDEN_EDGE:
                raise TemplateError(f"{where}: inline value {v!r} is empty or starts/ends with a "
                                    f"particle, space or punctuation")
        return ("slot", label, None, values)
    label, _, variant = body.partition("/")
    variant = variant or None
    if label not in SLOT_VARIANTS:
        raise TemplateError(f"{where}: unknown slot or macro {{{body}}}; expected one of "
                            f"{sorted(SLOT_VARIANTS)} or {sorted(MACROS)}")
    if variant not in SLOT_VARIANTS[label]:
        raise TemplateError(f"{where}: unknown variant {variant!r} for {label}; expected one of "
                            f"{sorted(v for v in SLOT_VARIANTS[label] if v)}")
    return ("slot", label, variant, None)


def parse_line(line, where):
    nodes, i = _parse_seq(line, 0, where, "")
    if i != len(line):
        raise TemplateError(f"{where}: trailing text at column {i + 1}")
    return nodes


class TemplateFile:
    """Templates of one intent: `train` and `heldout` lists of (where, nodes, source_line)."""

    def __init__(self, path):
        self.path = path
        self.intent = os.path.splitext(os.path.basename(path))[0]
        self.train, self.heldout = [], []
        section = None
        with open(path, encoding="utf-8") as f:
            for n, raw in enumerate(f, 1):
                line = raw.strip()
                where = f"{path}:{n}"
                if not line or (line.startswith("#") and not line.startswith("##")):
                    continue
                if line.startswith("##"):
                    name = line[2:].strip()
                    if name not in ("train", "heldout"):
                        raise TemplateError(f"{where}: unknown section {name!r}; expected "
                                            f"'## train' or '## heldout'")
                    section = name
                    continue
                if section is None:
                    raise TemplateError(f"{where}: template before any '## train' / '## heldout'")
                getattr(self, section).append((where, parse_line(line, where), line))


def expand(nodes, rng):
    """Fills one parsed template; returns merged segments [(text, label_or_None)]."""
    out = []
    _expand_into(nodes, rng, out)
    merged = []
    for text, label in out:
        if not text:
            continue
        if merged and label is None and merged[-1][1] is None:
            merged[-1] = (merged[-1][0] + text, None)
        else:
            merged.append((text, label))
    return merged


def _expand_into(nodes, rng, out):
    for node in nodes:
        kind = node[0]
        if kind == "text":
            out.append((node[1], None))
        elif kind == "alt":
            _expand_into(pools.pick(rng, node[1]), rng, out)
        elif kind == "macro":
            out.extend(macro(node[1], rng))
        else:
            _, label, variant, values = node
            if values and label == "item":
                value = pools.widen_item(values, rng)
            else:
                value = pools.pick(rng, values) if values else slot_value(label, variant, rng)
            out.append((value, label))


def slot_value(label, variant, rng):
    if label == "person_name":
        return pools.person_name(rng)
    if label == "phone":
        return pools.phone(rng, variant)
    if label == "id_number":
        return pools.id_number(rng)
    if label == "district":
        return pools.district(rng)
    if label == "address":
        return pools.address(rng, variant)
    if label == "time":
        return pools.time_value(rng, variant)
    if label == "organization":
        return pools.organization(rng, variant)
    if label == "plate_number":
        return pools.plate_number(rng)
    if label == "bus_line":
        return pools.bus_line(rng)
    if label == "amount":
        return pools.amount(rng, variant)
    if label == "order_id":
        return pools.order_id(rng)
    if label == "item":
        return pools.item(rng)
    raise TemplateError(f"no pool for slot type {label!r}")


def macro(name, rng):
    if name == "_city":
        return [(pools.city_name(rng), None)]
    if name == "_duration":
        return [(pools.duration(rng), None)]
    # place / home: district and/or address in the shapes callers use; home is a dwelling.
    city, dist = pools.pick(rng, pools.ALL_DISTRICTS)
    if name == "home":
        addr = pools.address(rng, rng.choices(["building", "compound", "road_compound", "road", "village"],
                                              [40, 25, 15, 12, 8])[0])
    else:
        addr = pools.address(rng)
    r = rng.random()
    if r < 0.33:
        return [(dist, "district"), (addr, "address")]
    if r < 0.66:
        return [(addr, "address")]
    if r < 0.76:
        return [(pools.city_name(rng, city), None), (dist, "district"), (addr, "address")]
    if r < 0.84:
        return [(dist, "district"), (pools.pick(rng, ["那个", "的", "这边", "那边", "，"]), None),
                (addr, "address")]
    if r < 0.9:
        return [(pools.city_name(rng, city), None), (addr, "address")]
    if r < 0.95:
        return [(dist, "district")]
    return [(pools.city_name(rng, city), None), (dist, "district")]
