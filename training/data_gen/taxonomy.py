"""Reads the ids the dataset depends on from config/taxonomy/hotline.yaml (stdlib only).

The file is a fixed, simple YAML shape (see the taxonomy README); this parser understands exactly
that shape: the top-level `slots:` map of `name: {...}` and the `intents:` list of
`- {id: ..., kind: ..., required_slots: [...]}` flow mappings. It raises ValueError on anything
it cannot read rather than guessing.
"""
import os
import re

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_PATH = os.path.join(REPO_ROOT, "config", "taxonomy", "hotline.yaml")

_INTENT_RE = re.compile(r"^\s*-\s*\{(.*)\}\s*$")
_SLOT_RE = re.compile(r"^\s{2}([a-z_]+):\s*\{.*\}\s*$")


def _parse_flow(body):
    """Parses `id: x, kind: y, required_slots: [a, b]` into a dict of strings / lists."""
    out = {}
    for m in re.finditer(r"([a-z_]+):\s*(\[[^\]]*\]|[^,]+)", body):
        key, val = m.group(1), m.group(2).strip()
        if val.startswith("["):
            out[key] = [v.strip() for v in val[1:-1].split(",") if v.strip()]
        else:
            out[key] = val
    return out


class Taxonomy:
    def __init__(self, path=DEFAULT_PATH):
        self.path = path
        self.intents = []  # list of dicts, file order
        self.slots = []  # slot names, file order
        section = None
        with open(path, encoding="utf-8") as f:
            for raw in f:
                line = raw.split("#", 1)[0].rstrip() if not raw.lstrip().startswith("-") else raw.rstrip()
                if not line.strip():
                    continue
                if re.match(r"^[a-z_]+:", line):
                    section = line.split(":", 1)[0]
                    continue
                if section == "slots":
                    m = _SLOT_RE.match(line)
                    if m:
                        self.slots.append(m.group(1))
                elif section == "intents":
                    m = _INTENT_RE.match(line)
                    if m:
                        d = _parse_flow(m.group(1))
                        if "id" not in d:
                            raise ValueError(f"{path}: intent without id: {line!r}")
                        d.setdefault("required_slots", [])
                        self.intents.append(d)
        if not self.intents or not self.slots:
            raise ValueError(f"{path}: expected non-empty 'slots' and 'intents', got "
                             f"{len(self.slots)} slots and {len(self.intents)} intents")
        self.intent_ids = [d["id"] for d in self.intents]
        self.intent_by_id = {d["id"]: d for d in self.intents}
        self.slot_set = set(self.slots)
