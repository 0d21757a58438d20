"""End to end, the call itself: the real `hotline serve` with the dialog on the shipped default
model, driven by clients we did not write (grpcio stubs generated from our proto, urllib, sqlite3,
tmux). Covers every scripted call in tests/dialog/*.jsonl (alternately over gRPC and HTTP), the
error codes, the dialog metrics, a call continued on a second server sharing Redis, SIGKILL while
work orders are written, `hotline chat` in a terminal, and that no log holds an ID or phone number.

Expectations come from the scripts (written from the taxonomy and the dialog's rules, not from
runs of this code), from SQLite's own integrity check, and from counting what the test itself saw.
"""
import collections
import json
import os
import re
import shlex
import sqlite3
import subprocess
import threading
import time

import grpc
import pytest

from conftest import ROOT, ServerProcess, hotline_bin, make_repo, metric_value
from dialog_harness import (DEFAULT_MODEL, LOG_FILES, DialogServer, GrpcCall, HttpCall, Redis,
                            check_call, load_scripts, model_repo, play)

SCRIPTED = load_scripts()
# Caller input with personal numbers in it; none of these may reach a log in clear.
PHONE, ID_NUMBER, LANDLINE = "13912345678", "110105194912310025", "02087654321"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("dialog")


@pytest.fixture(scope="module")
def repo(work):
    return model_repo(work / "models")


@pytest.fixture(scope="module")
def dserver(work, repo):
    srv = DialogServer(work / "main", repo, work / "main" / "work_orders.sqlite", name="main")
    yield srv
    rc = srv.stop()
    assert rc == 0, f"hotline serve exited with {rc} on SIGTERM:\n" + srv.log_path.read_text()[-4000:]


@pytest.fixture(scope="module")
def played():
    """What the scripted calls produced, shared with the metrics test."""
    return {"orders": {}, "calls": []}


def safe_id(text):
    return re.sub(r"[^A-Za-z0-9_.:-]", "-", text)[:100]


def first_script(pred, what):
    for s in SCRIPTED:
        if pred(s):
            return s
    raise AssertionError(f"no scripted call in tests/dialog/*.jsonl is {what}")


def dispatch_script():
    """A self-contained call that ends in a work order (no {order:...} references)."""
    return first_script(lambda s: s["expect"]["outcome"] == "dispatch"
                        and s["expect"].get("work_order") and len(s["turns"]) >= 3
                        and not any("{order:" in t for t in s["turns"]),
                        "a self-contained dispatch of 3+ turns")


def test_at_least_30_scripted_calls_covering_every_outcome():
    names = [s["name"] for s in SCRIPTED]
    assert len(SCRIPTED) >= 30, f"{len(SCRIPTED)} scripted calls in tests/dialog/*.jsonl"
    assert len(set(names)) == len(names), "scripted call names must be unique"
    outcomes = {o for s in SCRIPTED for o in (s["expect"]["outcome"]
                                               if isinstance(s["expect"]["outcome"], list)
                                               else [s["expect"]["outcome"]])}
    assert outcomes == {"dispatch", "answer", "human", "abandoned", "transfer"}, outcomes


@pytest.mark.parametrize("index", range(len(SCRIPTED)), ids=[s["name"] for s in SCRIPTED])
def test_scripted_call(index, stubs, dserver, played):
    script = SCRIPTED[index]
    call_id = safe_id(f"e2e-{index}-{script['name']}")
    # Even calls over gRPC, odd ones over HTTP: both transports play every kind of call.
    if index % 2 == 0:
        call = GrpcCall(stubs, dserver.channel, call_id, script.get("reference_time"))
    else:
        call = HttpCall(dserver, call_id, script.get("reference_time"))
    turns, summary, order = play(script, call, played["orders"])
    played["calls"].append((turns, summary))
    bad = check_call(script, turns, summary, order)
    if summary["call_id"] != call_id:
        bad.append(f"summary call_id {summary['call_id']!r}")
    if summary["turns"] != len(script["turns"]):
        bad.append(f"summary counts {summary['turns']} turns; {len(script['turns'])} played")
    if order is not None and order["call_id"] != call_id and call_id not in order["linked_calls"]:
        bad.append(f"work order belongs to call {order['call_id']!r}, which this call did not join")
    assert not bad, f"{script['name']} ({script['_where']}): " + "; ".join(bad)


def test_dialog_metrics_count_the_calls(dserver, played):
    """Runs after the scripted calls, on the same server, before anything else ends a call there."""
    assert played["calls"], "no scripted call was played"
    text = dserver.metrics()
    by_outcome_dept = collections.Counter(
        (s["outcome"], s["department"] or "none") for _, s in played["calls"])
    for (outcome, dept), n in by_outcome_dept.items():
        got = metric_value(text, "hotline_dialog_calls_total", outcome=outcome, department=dept)
        assert got == n, f"calls_total{{{outcome},{dept}}} = {got}, expected {n}"
    total = sum(v for line, v in _samples(text, "hotline_dialog_calls_total"))
    assert total == len(played["calls"])
    turns = [t for t, _ in played["calls"]]
    count = sum(v for _, v in _samples(text, "hotline_dialog_turns_per_call_count"))
    tsum = sum(v for _, v in _samples(text, "hotline_dialog_turns_per_call_sum"))
    assert count == len(played["calls"])
    assert tsum == sum(len(t) for t in turns)
    actions = collections.Counter(x["action"] for t in turns for x in t)
    for action, n in actions.items():
        assert metric_value(text, "hotline_dialog_turns_total", action=action) == n, action
    handoffs = metric_value(text, "hotline_dialog_handoffs_total") or 0
    assert handoffs == actions.get("handoff", 0)
    # A work order is counted on the turn that created it (the only turn that carries its id);
    # a call joined to an existing order (并单) is counted apart.
    created = [(x["work_order_id"], x["action"]) for t in turns for x in t
               if x["work_order_id"] and not x["merged"]]
    joined = [x["work_order_id"] for t in turns for x in t if x["work_order_id"] and x["merged"]]
    assert len({i for i, _ in created}) == len(created), created
    assert sum(v for _, v in _samples(text, "hotline_dialog_work_orders_total")) == len(created)
    assert sum(v for _, v in _samples(text, "hotline_dialog_merged_orders_total")) == len(joined)
    transfers = collections.Counter(x["transfer_to"] for t in turns for x in t if x["transfer_to"])
    assert sum(v for _, v in _samples(text, "hotline_dialog_emergency_transfers_total")) == sum(
        transfers.values())
    # A question asked word for word again in the same call is a slot asked again (prompts are
    # per slot type), so the counter is at least that many.
    reasked = 0
    for t in turns:
        asked = set()
        for x in t:
            if x["action"] == "ask_slot":
                reasked += x["reply"] in asked
                asked.add(x["reply"])
    assert (metric_value(text, "hotline_dialog_slots_reasked_total") or 0) >= reasked
    assert metric_value(text, "hotline_dialog_slots_reasked_total") is not None
    # The turn latency histogram saw every turn.
    assert sum(v for _, v in _samples(text, "hotline_dialog_turn_seconds_count")) == sum(
        len(t) for t in turns)


def _samples(text, name):
    """(line, value) of every sample of `name` (any labels)."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            out.append((line, float(line.rsplit(" ", 1)[1])))
    return out


def _code(fn):
    try:
        fn()
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


def test_errors_map_to_grpc_and_http_codes(stubs, dserver):
    stub = stubs.rpc.HotlineStub(dserver.channel)
    pb = stubs.pb
    conv = lambda cid, text: stub.Converse(pb.ConverseRequest(call_id=cid, text=text), timeout=30)
    INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
    assert _code(lambda: conv("", "我家停水了")) == INVALID
    assert _code(lambda: conv("x" * 129, "我家停水了")) == INVALID
    assert _code(lambda: conv("bad id/1", "我家停水了")) == INVALID
    assert _code(lambda: conv("e2e-empty-text", "")) == INVALID
    assert _code(lambda: conv("e2e-long-text", "停" * 20000)) == INVALID
    assert _code(lambda: stub.EndCall(pb.EndCallRequest(call_id="e2e-never-started"),
                                      timeout=30)) == NOT_FOUND
    assert _code(lambda: stub.EndCall(pb.EndCallRequest(call_id="bad id"), timeout=30)) == INVALID
    assert _code(lambda: stub.GetWorkOrder(pb.GetWorkOrderRequest(id="WO-none-1"),
                                           timeout=30)) == NOT_FOUND
    # Text that is not UTF-8, sent as raw bytes (proto3 forbids it; grpcio would refuse to
    # serialise it): ConverseRequest{call_id: "e2e-utf8", text: b"\xff\xfe"}.
    raw = dserver.channel.unary_unary("/hotline.v1.Hotline/Converse",
                                      request_serializer=None, response_deserializer=None)
    body = b"\x0a\x08e2e-utf8" + b"\x12\x02\xff\xfe"
    assert _code(lambda: raw(body, timeout=30)) == INVALID
    # A refused turn does not start a call.
    assert _code(lambda: stub.EndCall(pb.EndCallRequest(call_id="e2e-empty-text"),
                                      timeout=30)) == NOT_FOUND

    def http(path, body, method=None):
        status, r = dserver.http(path, body, method=method)
        return status, (r.get("code") if isinstance(r, dict) else r)

    assert http("/v1/converse", {"call_id": "", "text": "停水"}) == (400, "INVALID_ARGUMENT")
    assert http("/v1/converse", {"call_id": "e2e-h1", "text": ""}) == (400, "INVALID_ARGUMENT")
    assert http("/v1/converse", {"call_id": "e2e-h1", "txt": "停水"}) == (400, "INVALID_ARGUMENT")
    assert http("/v1/converse", b"{not json") == (400, "INVALID_ARGUMENT")
    assert http("/v1/converse", b'{"call_id": "e2e-h2", "text": "\xff"}') == (400,
                                                                             "INVALID_ARGUMENT")
    assert http("/v1/calls/e2e-never-started/end", b"", method="POST") == (404, "NOT_FOUND")
    assert http("/v1/calls/bad%20id/end", b"", method="POST")[0] in (400, 404)
    assert http("/v1/work-orders/WO-none-1", None) == (404, "NOT_FOUND")
    assert http("/v1/no-such-route", None) == (404, "NOT_FOUND")

    # httplib's own refusals get our JSON error shape too: a POST without Content-Length (what
    # `curl -X POST URL` sends) cannot be read, and says how to send it.
    import socket
    with socket.create_connection(("127.0.0.1", dserver.http_port), timeout=30) as sock:
        sock.sendall(b"POST /v1/calls/e2e-h3/end HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        raw_reply = b""
        while chunk := sock.recv(65536):
            raw_reply += chunk
    head, _, payload = raw_reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), head
    err = json.loads(payload)
    assert err["code"] == "INVALID_ARGUMENT" and "Content-Length" in err["message"], err


def test_a_turn_returns_the_nlu_and_the_call_state_over_both_transports(stubs, dserver):
    """The same turn over gRPC and HTTP gives the same reply, action and understanding."""
    g = GrpcCall(stubs, dserver.channel, "e2e-same-g").turn("我家停水了")
    h = HttpCall(dserver, "e2e-same-h").turn("我家停水了")
    assert g == h
    assert g["nlu_intent"] and g["reply"]
    for cid in ["e2e-same-g", "e2e-same-h"]:
        status, r = dserver.http(f"/v1/calls/{cid}/end", b"{}", method="POST")
        assert status == 200 and r["call_id"] == cid and r["turns"] == 1
        # Ended means forgotten: a second end is NOT_FOUND.
        assert dserver.http(f"/v1/calls/{cid}/end", b"", method="POST")[0] == 404


def test_server_without_dialog_answers_unimplemented(stubs, tmp_path_factory):
    work = tmp_path_factory.mktemp("nodialog")
    srv = ServerProcess(work, make_repo(work / "models"))
    LOG_FILES.append(srv.log_path)
    try:
        with grpc.insecure_channel(srv.target) as ch:
            stub = stubs.rpc.HotlineStub(ch)
            assert _code(lambda: stub.Converse(stubs.pb.ConverseRequest(call_id="a", text="停水"),
                                               timeout=30)) == grpc.StatusCode.UNIMPLEMENTED
        assert srv.http("/v1/converse", b'{"call_id": "a", "text": "x"}',
                        {"Content-Type": "application/json"}, method="POST")[0] == 501
        assert "hotline_dialog_calls_total" not in srv.metrics()
    finally:
        assert srv.stop() == 0


class _Switching:
    """One call id played on several servers: turn i goes to calls[i % n]."""

    def __init__(self, calls):
        self.calls, self.i = calls, 0

    def turn(self, text):
        r = self.calls[self.i % len(self.calls)].turn(text)
        self.i += 1
        return r

    def end(self):
        return self.calls[self.i % len(self.calls)].end()

    def work_order(self, order_id):
        return self.calls[0].work_order(order_id)


def test_call_continues_on_a_second_server_sharing_redis(stubs, work, repo):
    redis = Redis(work / "redis")
    servers = []
    try:
        db = work / "shared" / "work_orders.sqlite"
        for n in "ab":
            servers.append(DialogServer(work / "shared", repo, db, redis.url, name=n))
        for script in [dispatch_script(),
                       first_script(lambda s: s["expect"]["outcome"] == "answer"
                                    and len(s["turns"]) >= 2, "an answer of 2+ turns")]:
            cid = safe_id(f"e2e-shared-{script['name']}")
            call = _Switching([GrpcCall(stubs, s.channel, cid, script.get("reference_time"))
                               for s in servers])
            turns, summary, order = play(script, call, {})
            bad = check_call(script, turns, summary, order)
            assert not bad, f"{script['name']} across two servers: " + "; ".join(bad)
            assert summary["turns"] == len(script["turns"])
        # The control: the same call on two servers that do NOT share a store breaks (the second
        # server does not know the call), so the pass above is Redis's doing.
        script = dispatch_script()
        for n in "cd":
            servers.append(DialogServer(work / "alone", repo, work / "alone" / f"wo-{n}.sqlite",
                                        name=n))
        alone = servers[-2:]
        c = GrpcCall(stubs, alone[0].channel, "e2e-alone", script.get("reference_time"))
        c.turn(script["turns"][0])
        d = GrpcCall(stubs, alone[1].channel, "e2e-alone")
        assert _code(d.end) == grpc.StatusCode.NOT_FOUND
        c.end()
    finally:
        for s in servers:
            assert s.stop() == 0, s.log_path.read_text()[-3000:]
        redis.stop()


def test_sigkill_while_writing_work_orders_loses_none_acknowledged(stubs, work, repo):
    script = dispatch_script()
    d = work / "kill"
    db = d / "work_orders.sqlite"
    # The same call played many times would join the first order (并单): joining is off here, so
    # every acknowledged turn is a new order.
    d.mkdir(parents=True, exist_ok=True)
    no_merge = d / "dialog.yaml"
    no_merge.write_text((ROOT / "config" / "dialog.yaml").read_text(encoding="utf-8")
                        .replace("duplicate_window_h: 72", "duplicate_window_h: 0"),
                        encoding="utf-8")
    assert "duplicate_window_h: 0" in no_merge.read_text(encoding="utf-8")
    srv = DialogServer(d, repo, db, name="killed", dialog_config=no_merge)
    acked, lock, stop = [], threading.Lock(), threading.Event()

    def caller(k):
        i = 0
        while not stop.is_set():
            call = GrpcCall(stubs, srv.channel, f"kill-{k}-{i}", script.get("reference_time"))
            try:
                for text in script["turns"]:
                    r = call.turn(text)
                    if r["work_order_id"]:
                        with lock:
                            acked.append((r["work_order_id"], call.call_id))
            except (grpc.RpcError, ValueError):
                return  # the server is gone (or the channel closed under us)
            i += 1

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    deadline = time.time() + 150
    while time.time() < deadline:
        with lock:
            if len(acked) >= 48:
                break
        time.sleep(0.05)
    srv.kill()  # SIGKILL with 16 callers mid-call: some confirmations are being written
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert len(acked) >= 48, f"only {len(acked)} work orders acknowledged before the kill"
    assert len({a for a, _ in acked}) == len(acked), "a work order id was given twice"
    # The store opens cleanly: SQLite's own check, by SQLite itself (not our code).
    con = sqlite3.connect(str(db))
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
    finally:
        con.close()
    # Every acknowledged order is there, read back through a new server on the same file.
    after = DialogServer(d, repo, db, name="after-kill")
    try:
        missing = []
        for order_id, call_id in acked:
            status, r = after.http(f"/v1/work-orders/{order_id}")
            if status != 200 or r.get("call_id") != call_id:
                missing.append((order_id, status))
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged orders lost: {missing[:5]}"
    finally:
        assert after.stop() == 0


def _tmux(sock, *args, check=True):
    env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8")
    return subprocess.run(["tmux", "-u", "-L", sock, "-f", "/dev/null", *args], check=check,
                          capture_output=True, text=True, env=env, timeout=30)


def _pane(sock):
    return _tmux(sock, "capture-pane", "-p", "-J", "-S", "-", "-t", "chat").stdout


def _wait_pane(sock, pred, what, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = _pane(sock)
        if pred(text):
            return text
        time.sleep(0.1)
    raise AssertionError(f"chat: timed out waiting for {what}; the pane shows:\n{_pane(sock)}")


@pytest.mark.parametrize("mode", ["server", "in_process"])
def test_chat_in_tmux(mode, dserver, work):
    """`hotline chat` in a real terminal (tmux): the caller types each turn, reads the reply."""
    script = dispatch_script()
    sock = f"hotline-e2e-{os.getpid()}-{mode}"
    err = work / f"chat-{mode}.log"
    LOG_FILES.append(err)
    args = [hotline_bin(), "chat", "--show-nlu", "--call-id", f"e2e-chat-{mode}"]
    if script.get("reference_time"):
        args += ["--reference-time", script["reference_time"]]
    if mode == "server":
        args += ["--server", dserver.target]
    else:
        args += ["--model", str(DEFAULT_MODEL), "--work-order-db",
                 str(work / "chat" / "work_orders.sqlite")]
        (work / "chat").mkdir(exist_ok=True)
    shell = (f"cd {shlex.quote(str(ROOT))} && {shlex.join(args)} 2>{shlex.quote(str(err))}; "
             f"echo CHAT-EXIT=$?; sleep 600")
    _tmux(sock, "new-session", "-d", "-s", "chat", "-x", "220", "-y", "60", shell)
    try:
        _wait_pane(sock, lambda t: "来电> " in t, "the first prompt")
        for i, text in enumerate(script["turns"]):
            _tmux(sock, "send-keys", "-t", "chat", "-l", text)
            _tmux(sock, "send-keys", "-t", "chat", "Enter")
            # The greeting plus one reply per turn so far.
            _wait_pane(sock, lambda t: t.count("热线: ") >= i + 2 and t.count("[call]") >= i + 1,
                       f"the reply to turn {i + 1}")
        try:
            text = _wait_pane(sock, lambda t: "CHAT-EXIT=" in t, "the end of the call", 10)
        except AssertionError:
            # The dialog did not end the call itself: the caller hangs up.
            _tmux(sock, "send-keys", "-t", "chat", "-l", "/end")
            _tmux(sock, "send-keys", "-t", "chat", "Enter")
            text = _wait_pane(sock, lambda t: "CHAT-EXIT=" in t, "the end of the call")
    finally:
        _tmux(sock, "kill-server", check=False)
    assert "CHAT-EXIT=0" in text, text
    assert text.count("[nlu] intent=") == len(script["turns"]), text
    m = re.search(r"\[通话结束\] outcome=(\S+) intent=(\S*) department=(\S*) work_order=(\S+)",
                  text)
    assert m, text
    e = script["expect"]
    assert m.group(1) == e["outcome"], text
    actions = re.findall(r"\[call\] action=(\S+)", text)
    assert len(actions) == len(script["turns"]), text
    for got, want in zip(actions, e.get("actions", [])):
        assert want is None or got == want, (actions, e["actions"])
    if "department" in e:
        assert m.group(3) == e["department"], text
    order_id = m.group(4)
    assert order_id != "-", text
    if mode == "server":
        status, order = dserver.http(f"/v1/work-orders/{order_id}")
        # The scripted run filed this same call before: the chat call may join that order (并单).
        assert status == 200 and (order["call_id"] == "e2e-chat-server"
                                  or "e2e-chat-server" in order["linked_calls"]), (status, order)
    else:
        con = sqlite3.connect(str(work / "chat" / "work_orders.sqlite"))
        try:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            con.close()


def test_a_call_full_of_personal_numbers(stubs, dserver):
    """Feeds phone and ID numbers (also in the call id) through a call, so the log check below
    has something to find if any of it leaked."""
    cid = f"call-{PHONE}"
    call = GrpcCall(stubs, dserver.channel, cid)
    for text in [f"我的电话是{PHONE}", f"身份证号{ID_NUMBER}", f"座机{LANDLINE}",
                 "我要查社保，身份证是幺幺零幺零五幺九四九幺二三幺零零二五"]:
        call.turn(text)
    call.end()
    status, _ = dserver.http(f"/v1/work-orders/WO{PHONE}")
    assert status == 404


MOBILE_RE = re.compile(r"(?<![\d.])1[3-9]\d{9}(?!\d)")
ID_RE = re.compile(r"(?<![\d.])\d{17}[\dXx](?![\dXx])")


def test_zz_logs_hold_no_id_or_phone_numbers_in_clear(dserver):
    """Last in the file: greps every log this run wrote (servers, killed servers, chat)."""
    logs = [p for p in LOG_FILES if p.exists()]
    assert dserver.log_path in logs and len(logs) >= 5, logs
    dserver.log.flush()
    found = []
    for p in logs:
        text = p.read_text(errors="replace")
        for needle in [PHONE, ID_NUMBER, LANDLINE, "020-87654321"]:
            if needle in text:
                found.append((p.name, needle))
        for rx in [MOBILE_RE, ID_RE]:
            found += [(p.name, m.group(0)) for m in rx.finditer(text)]
    assert not found, f"personal numbers in clear in the logs: {found[:10]}"
    # The turns were logged (masked), so the check above looked at real log lines.
    main = dserver.log_path.read_text()
    assert '"event":"converse"' in main and "call-139****5678" in main, main[-2000:]
