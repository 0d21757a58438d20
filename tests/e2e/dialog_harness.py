"""Helpers for the dialog end-to-end tests: a `hotline serve` with the dialog on the real default
model (models/default), Redis started through the project's scripts/redis.sh, the scripted calls of
tests/dialog/*.jsonl and a runner that plays one over gRPC or HTTP."""
import datetime
import json
import re
import signal
import subprocess
from pathlib import Path

import grpc

from conftest import ROOT, ServerProcess, free_ports

DEFAULT_MODEL = ROOT / "models" / "default"
SCRIPTS = ROOT / "tests" / "dialog"
ORDER_REF = re.compile(r"\{order:([A-Za-z0-9_.-]+)\}")

# Every log file a test of this run wrote (servers, chat); the PII check greps them all.
LOG_FILES = []


def model_repo(root: Path) -> Path:
    """A repository holding the default model (a link: its plan cache is shared with make run)."""
    root.mkdir(parents=True, exist_ok=True)
    link = root / "default"
    if not link.exists():
        link.symlink_to(DEFAULT_MODEL, target_is_directory=True)
    return root


class DialogServer(ServerProcess):
    """`hotline serve` with a dialog: section, run from the repository root so config/dialog.yaml
    and config/answers resolve as they do for `make run`."""

    def __init__(self, workdir: Path, repo: Path, work_order_db: Path, session_store="memory",
                 name="server", dialog_config=None):
        self.work_order_db = work_order_db
        self.session_store = session_store
        self.dialog_config = dialog_config or ROOT / "config" / "dialog.yaml"
        self.channel = None
        LOG_FILES.append(workdir / f"{name}.log")
        super().__init__(workdir, repo, name=name, cwd=ROOT)
        self.channel = grpc.insecure_channel(self.target)

    def config_body(self, repo: Path) -> str:
        return (f"model_repository: {repo}\nstartup_models: [default]\ndefault_model: default\n"
                f"log_requests: true\n"
                f"dialog:\n  config: {self.dialog_config}\n"
                f"  session_store: {self.session_store}\n  work_order_db: {self.work_order_db}\n"
                f"  workers: 4\n")

    def http(self, path, body=None, method=None, headers=None):
        """(status, parsed JSON or raw bytes) of an HTTP request; error statuses are returned."""
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        status, raw = self.raw_http(path, data, headers or {"Content-Type": "application/json"},
                                    method, timeout=60)
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw

    def wait_ready(self, timeout=300):
        super().wait_ready(timeout)

    def stop(self, timeout=60):
        if self.channel is not None:
            self.channel.close()
        return super().stop(timeout)

    def kill(self):
        """SIGKILL: no shutdown code runs."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        if self.channel is not None:
            self.channel.close()
        self.log.close()


class Redis:
    """redis-server started and stopped through the project's scripts/redis.sh."""

    def __init__(self, workdir: Path):
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_ports(1)[0]
        self.dir = workdir
        subprocess.run(["bash", str(ROOT / "scripts" / "redis.sh"), "start", str(self.port),
                        str(workdir)], check=True, timeout=60, cwd=str(ROOT))

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self):
        subprocess.run(["bash", str(ROOT / "scripts" / "redis.sh"), "stop", str(self.port),
                        str(self.dir)],
                       check=False, timeout=60, cwd=str(ROOT))


def load_scripts():
    """Every scripted call, files in name order, lines in order."""
    calls = []
    for path in sorted(SCRIPTS.glob("*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            call = json.loads(line)
            call["_where"] = f"{path.name}:{n}"
            calls.append(call)
    return calls


def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def fill_orders(text, orders, name):
    def sub(m):
        ref = m.group(1)
        assert orders.get(ref), f"{name}: turn refers to {{order:{ref}}} but call {ref} made none"
        return orders[ref]
    return ORDER_REF.sub(sub, text)


class GrpcCall:
    """One call over gRPC (hotline.v1.Hotline Converse / EndCall / GetWorkOrder)."""

    def __init__(self, stubs, channel, call_id, reference_time=None):
        self.pb = stubs.pb
        self.stub = stubs.rpc.HotlineStub(channel)
        self.call_id = call_id
        self.ref = parse_time(reference_time) if reference_time else None

    def turn(self, text):
        req = self.pb.ConverseRequest(call_id=self.call_id, text=text)
        if self.ref is not None:
            req.reference_time.FromDatetime(self.ref.astimezone(datetime.timezone.utc)
                                            .replace(tzinfo=None))
        r = self.stub.Converse(req, timeout=60)
        return {"reply": r.reply, "action": r.action, "intent": r.intent,
                "department": r.department, "work_order_id": r.work_order_id, "done": r.done,
                "slots": [{"type": s.type, "value": s.value, "normalized": s.normalized}
                          for s in r.slots],
                "nlu_intent": r.understanding.intent, "acts": list(r.acts),
                "merged": r.merged, "transfer_to": r.transfer_to}

    def end(self):
        r = self.stub.EndCall(self.pb.EndCallRequest(call_id=self.call_id), timeout=60)
        return {"call_id": r.call_id, "outcome": r.outcome, "intent": r.intent,
                "department": r.department, "work_order_id": r.work_order_id, "turns": r.turns,
                "slots": [{"type": s.type, "value": s.value, "normalized": s.normalized}
                          for s in r.slots],
                "issues": [{"intent": i.intent, "kind": i.kind, "department": i.department,
                            "outcome": i.outcome, "work_order_id": i.work_order_id,
                            "transfer_to": i.transfer_to} for i in r.issues]}

    def work_order(self, order_id):
        r = self.stub.GetWorkOrder(self.pb.GetWorkOrderRequest(id=order_id), timeout=60)
        return {"id": r.id, "call_id": r.call_id, "intent": r.intent, "department": r.department,
                "caller_text": r.caller_text, "created_at": r.created_at, "status": r.status,
                "slots": [{"type": s.type, "value": s.value, "normalized": s.normalized}
                          for s in r.slots],
                "summary": r.summary, "linked_calls": list(r.linked_calls)}


class HttpCall:
    """One call over HTTP (POST /v1/converse, POST /v1/calls/{id}/end, GET /v1/work-orders/{id})."""

    def __init__(self, server, call_id, reference_time=None):
        self.server = server
        self.call_id = call_id
        self.ref = reference_time

    def turn(self, text):
        body = {"call_id": self.call_id, "text": text}
        if self.ref:
            body["reference_time"] = self.ref
        status, r = self.server.http("/v1/converse", body)
        assert status == 200, f"converse answered {status}: {r}"
        out = {k: r[k] for k in ["reply", "action", "intent", "department", "work_order_id",
                                 "done", "slots", "acts", "merged", "transfer_to"]}
        out["nlu_intent"] = r["understanding"]["intent"]
        return out

    def end(self):
        status, r = self.server.http(f"/v1/calls/{self.call_id}/end", b"", method="POST")
        assert status == 200, f"end answered {status}: {r}"
        return r

    def work_order(self, order_id):
        status, r = self.server.http(f"/v1/work-orders/{order_id}")
        assert status == 200, f"work order {order_id}: {status} {r}"
        return r


def slot_map(slots, key):
    return {s["type"]: s[key] for s in slots}


def check_call(script, turns, summary, order=None):
    """Mismatches between a played call and its expectations (an empty list when it passed)."""
    e = script["expect"]
    bad = []
    # "outcome" is one outcome, or a list of the acceptable ones (a turn the model may read
    # either way, where every reading is handled right).
    allowed = e["outcome"] if isinstance(e["outcome"], list) else [e["outcome"]]
    if summary["outcome"] not in allowed:
        bad.append(f"outcome {summary['outcome']!r}, expected {' or '.join(map(repr, allowed))}")
    for key in ["intent", "department"]:
        if key in e and summary[key] != e[key]:
            bad.append(f"{key} {summary[key]!r}, expected {e[key]!r}")
    for key, field in [("slots", "value"), ("normalized", "normalized")]:
        got = slot_map(summary["slots"], field)
        for t, v in e.get(key, {}).items():
            if got.get(t) != v:
                bad.append(f"slot {t} {field} {got.get(t)!r}, expected {v!r}")
    if "work_order" in e and bool(summary["work_order_id"]) != e["work_order"]:
        bad.append(f"work order {summary['work_order_id']!r}, expected one: {e['work_order']}")
    if "done" in e and turns[-1]["done"] != e["done"]:
        bad.append(f"last turn done={turns[-1]['done']}, expected {e['done']}")
    if "actions" in e:
        got = [t["action"] for t in turns]
        for i, (g, w) in enumerate(zip(got, e["actions"])):
            if w is not None and g != w:
                bad.append(f"turn {i + 1} action {g!r}, expected {w!r} (all: {got})")
        if len(e["actions"]) != len(turns):
            bad.append(f"{len(turns)} turns played, {len(e['actions'])} actions expected")
    if "acts" in e:
        if len(e["acts"]) != len(turns):
            bad.append(f"{len(turns)} turns played, {len(e['acts'])} act lists expected")
        for i, (t, want) in enumerate(zip(turns, e["acts"])):
            for act in want or []:
                if act not in t["acts"]:
                    bad.append(f"turn {i + 1} lacks act {act!r} (has {t['acts']})")
    issues = summary.get("issues", [])
    orders = {i["work_order_id"] for i in issues if i["work_order_id"]}
    if "work_orders" in e and len(orders) != e["work_orders"]:
        bad.append(f"{len(orders)} work orders, expected {e['work_orders']}")
    merged = any(i["outcome"] == "merged" for i in issues)
    if "merged" in e and merged != e["merged"]:
        bad.append(f"merged={merged}, expected {e['merged']}")
    transfer = next((i["transfer_to"] for i in issues if i["transfer_to"]), "")
    if "transfer_to" in e and transfer != e["transfer_to"]:
        bad.append(f"transfer to {transfer!r}, expected {e['transfer_to']!r}")
    if "issues" in e:
        if len(issues) != len(e["issues"]):
            bad.append(f"{len(issues)} issues, expected {len(e['issues'])}")
        for n, (got, want) in enumerate(zip(issues, e["issues"]), 1):
            for k, v in want.items():
                if got.get(k) != v:
                    bad.append(f"issue {n} {k} {got.get(k)!r}, expected {v!r}")
    if "order_text_contains" in e and order is not None:
        for w in e["order_text_contains"]:
            if w not in order.get("summary", ""):
                bad.append(f"work order text lacks {w!r}: {order.get('summary')!r}")
    if "reply_contains" in e and e["reply_contains"] not in turns[-1]["reply"]:
        bad.append(f"last reply {turns[-1]['reply']!r} lacks {e['reply_contains']!r}")
    if order is not None:
        if order["id"] != summary["work_order_id"]:
            bad.append(f"work order read back has id {order['id']!r}")
        for key in ["intent", "department"]:
            if order[key] != summary[key]:
                bad.append(f"work order {key} {order[key]!r} != summary's {summary[key]!r}")
        # A call joined to an earlier caller's order (并单) keeps its own words; the order keeps
        # the first caller's.
        if (order["call_id"] == summary["call_id"] and
                slot_map(order["slots"], "normalized") != slot_map(summary["slots"], "normalized")):
            bad.append(f"work order slots {order['slots']} != summary's {summary['slots']}")
    return bad


def play(script, call, orders):
    """Plays a scripted call through `call` (GrpcCall or HttpCall): (turns, summary, order)."""
    turns = []
    for text in script["turns"]:
        turns.append(call.turn(fill_orders(text, orders, script["name"])))
    summary = call.end()
    order = call.work_order(summary["work_order_id"]) if summary["work_order_id"] else None
    orders[script["name"]] = summary["work_order_id"]
    return turns, summary, order
