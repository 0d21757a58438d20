"""End to end, two servers sharing calls (Redis) and work orders (PostgreSQL), with API keys on:
a call moves between the servers turn by turn, its order is readable from both over gRPC and
HTTP, operators list, search and update it through either, every read and write lands in the
audit log, and neither a server killed with -9 nor a PostgreSQL restart loses an acknowledged
order. PostgreSQL and Redis are started through the project's own scripts (scripts/postgres.sh,
scripts/redis.sh); the clients are grpcio (stubs generated from our proto) and urllib."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import grpc
import pytest

from conftest import ROOT
from conftest import free_ports
from dialog_harness import DialogServer, GrpcCall, check_call, load_scripts, model_repo, play

REDIS_PASSWORD = "redis-pw-0123456789"


class Redis:
    """redis-server with a password, through the project's scripts/redis.sh."""

    def __init__(self, workdir):
        workdir.mkdir(parents=True, exist_ok=True)
        self.port, self.dir = free_ports(1)[0], workdir
        env = dict(os.environ, REDIS_PASSWORD=REDIS_PASSWORD)
        subprocess.run(["bash", str(ROOT / "scripts" / "redis.sh"), "start", str(self.port),
                        str(workdir)], check=True, timeout=60, env=env)

    @property
    def url(self):
        return f"redis://:{REDIS_PASSWORD}@127.0.0.1:{self.port}/0"

    def stop(self):
        subprocess.run(["bash", str(ROOT / "scripts" / "redis.sh"), "stop", str(self.port),
                        str(self.dir)], check=False, timeout=60)

KEYS = {"gateway": ("gateway-key-0123456789abcdef", "[converse]"),
        "clerk": ("clerk-key-0123456789abcdef01", "[read_orders]"),
        "ops": ("ops-key-0123456789abcdef0123", "[read_orders, supervise]")}


class _Key(grpc.UnaryUnaryClientInterceptor):
    """Adds `authorization: Bearer KEY` to every call on a channel."""

    def __init__(self, key):
        self.key = key

    def intercept_unary_unary(self, continuation, details, request):
        md = list(details.metadata or []) + [("authorization", f"Bearer {self.key}")]
        details = details._replace(metadata=md) if hasattr(details, "_replace") else _Details(
            details, md)
        return continuation(details, request)


class _Details(grpc.ClientCallDetails):
    def __init__(self, d, metadata):
        self.method, self.timeout, self.credentials = d.method, d.timeout, d.credentials
        self.wait_for_ready, self.compression = d.wait_for_ready, d.compression
        self.metadata = metadata


class SharedServer(DialogServer):
    """A dialog server on PostgreSQL and Redis with API keys and an audit log; its gRPC channel
    and HTTP requests carry `key` (the gateway's unless told)."""

    def __init__(self, workdir, repo, pg_url, redis_url, name, key="gateway"):
        self.audit = workdir / f"{name}-audit.jsonl"
        self.key = KEYS[key][0]
        super().__init__(workdir, repo, pg_url, redis_url, name=name)
        self.plain = self.channel
        self.channel = grpc.intercept_channel(self.plain, _Key(self.key))

    def config_body(self, repo):
        clients = "".join(
            f"  - {{name: {n}, key_sha256: {hashlib.sha256(k.encode()).hexdigest()}, roles: {r}}}\n"
            for n, (k, r) in KEYS.items())
        # Random order numbers: the dialog section ends the base config, so this joins it.
        return super().config_body(repo) + "  work_order_ids: random\n" + (
            f"security:\n  audit_log: {self.audit}\n  clients:\n{clients}")

    def as_client(self, who, path, body=None, method=None):
        headers = {"Authorization": f"Bearer {KEYS[who][0]}"} if who else {}
        if body is not None:
            headers["Content-Type"] = "application/json"
            body = json.dumps(body).encode()
        status, raw = self.raw_http(path, body, headers, method, timeout=60)
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw

    def http(self, path, body=None, method=None, headers=None):
        return self.as_client("gateway", path, body, method)

    def audit_lines(self):
        return [json.loads(l) for l in self.audit.read_text().splitlines()] \
            if self.audit.exists() else []

    def stop(self, timeout=60):
        self.plain.close()
        return super().stop(timeout)

    def kill(self):
        self.plain.close()
        super().kill()


@pytest.fixture(scope="module")
def pg():
    """A throwaway PostgreSQL cluster (scripts/postgres.sh) for this module."""
    d = Path(tempfile.mkdtemp(prefix="hotline-pg-e2e."))
    d.chmod(0o755)  # the cluster's owner (postgres, when run as root) must enter it
    script = ROOT / "scripts" / "postgres.sh"
    url = subprocess.run(["bash", str(script), "start", str(d)], check=True, text=True,
                         capture_output=True, timeout=120).stdout.strip()

    class Cluster:
        pass

    c = Cluster()
    c.url, c.dir = url, d
    c.restart = lambda: subprocess.run(["bash", str(script), "restart", str(d)], check=True,
                                       capture_output=True, timeout=120)
    yield c
    subprocess.run(["bash", str(script), "stop", str(d)], check=False, capture_output=True,
                   timeout=120)
    shutil.rmtree(d, ignore_errors=True)


def dispatch_script():
    for s in load_scripts():
        e = s["expect"]
        if (e["outcome"] == "dispatch" and e.get("work_order") and len(s["turns"]) >= 3
                and not any("{order:" in t for t in s["turns"])):
            return s
    raise AssertionError("no self-contained dispatch call of 3+ turns in tests/dialog/*.jsonl")


class Switching:
    """One call id played on several servers: turn i goes to calls[i % n]; the order is read
    through `reader` (the gateway holds no read_orders role)."""

    def __init__(self, calls, reader):
        self.calls, self.reader, self.i = calls, reader, 0

    def turn(self, text):
        r = self.calls[self.i % len(self.calls)].turn(text)
        self.i += 1
        return r

    def end(self):
        return self.calls[self.i % len(self.calls)].end()

    def work_order(self, order_id):
        return self.reader.work_order(order_id)


def test_two_servers_share_calls_and_orders(stubs, tmp_path, pg):
    repo = model_repo(tmp_path / "models")
    redis = Redis(tmp_path / "redis")
    servers = []
    try:
        servers = [SharedServer(tmp_path, repo, pg.url, redis.url, name=n) for n in "ab"]
        a, b = servers
        # The store is a URL, not a path: nothing named after it appears in the servers' folder.
        assert not list(ROOT.glob("postgres*:")), "a folder was made from the PostgreSQL URL"
        script = dispatch_script()
        clerk = grpc.intercept_channel(a.plain, _Key(KEYS["clerk"][0]))
        call = Switching([GrpcCall(stubs, s.channel, "shared-1", script.get("reference_time"))
                          for s in servers], GrpcCall(stubs, clerk, "shared-1"))
        turns, summary, order = play(script, call, {})
        bad = check_call(script, turns, summary, order)
        assert not bad, "; ".join(bad)
        oid = summary["work_order_id"]
        # Drawn at random (WO<day>-<6 digits>), not counted from 1.
        assert re.fullmatch(r"WO\d{8}-\d{6}", oid) and int(oid[-6:]) > 2, oid
        # Readable from both servers, over both transports, for a client holding read_orders.
        for s in servers:
            status, body = s.as_client("clerk", f"/v1/work-orders/{oid}")
            assert status == 200 and body["id"] == oid, body
            stub = stubs.rpc.HotlineStub(grpc.intercept_channel(s.plain, _Key(KEYS["clerk"][0])))
            assert stub.GetWorkOrder(stubs.pb.GetWorkOrderRequest(id=oid), timeout=30).id == oid
        # The gateway may converse but not read orders; no key at all: 401.
        assert a.as_client("gateway", f"/v1/work-orders/{oid}")[0] == 403
        assert a.as_client(None, f"/v1/work-orders/{oid}")[0] == 401

        # Operators: search on one server, update on the other, read back on the first.
        status, body = b.as_client("ops", "/v1/work-orders?status=open&limit=10")
        assert status == 200 and oid in [o["id"] for o in body["orders"]], body
        word = script["turns"][0][:4]
        status, body = b.as_client("ops", f"/v1/work-orders?text={urlquote(word)}")
        assert status == 200 and oid in [o["id"] for o in body["orders"]], (word, body)
        assert b.as_client("clerk", "/v1/work-orders")[0] == 403
        status, body = a.as_client("ops", f"/v1/work-orders/{oid}",
                                   {"status": "in_progress", "note": "已派单位处理"}, "PATCH")
        assert status == 200 and body["status"] == "in_progress", body
        status, body = a.as_client("ops", f"/v1/work-orders/{oid}", {"status": "done"}, "PATCH")
        assert status == 400 and body["code"] == "INVALID_ARGUMENT", body
        ops_b = stubs.rpc.HotlineStub(grpc.intercept_channel(b.plain, _Key(KEYS["ops"][0])))
        got = ops_b.GetWorkOrder(stubs.pb.GetWorkOrderRequest(id=oid), timeout=30)
        assert got.status == "in_progress" and got.updated_at
        assert [(n.by, n.text, n.status) for n in got.notes] == \
            [("ops", "已派单位处理", "in_progress")]
        r = ops_b.UpdateWorkOrder(stubs.pb.UpdateWorkOrderRequest(id=oid, note="现场已修复",
                                                                  status="resolved"), timeout=30)
        assert r.status == "resolved" and len(r.notes) == 2
        listed = ops_b.ListWorkOrders(stubs.pb.ListWorkOrdersRequest(status="resolved"),
                                      timeout=30)
        assert [o.id for o in listed.orders] == [oid]

        # The audit logs: who created, read and updated which order, on which server.
        lines = a.audit_lines() + b.audit_lines()
        seen = {(l["client"], l["action"], l["order_id"], l["code"]) for l in lines}
        assert ("gateway", "create", oid, "OK") in seen, lines
        assert ("clerk", "read", oid, "OK") in seen
        assert ("ops", "update", oid, "OK") in seen
        assert ("ops", "update", oid, "INVALID_ARGUMENT") in seen
        assert any(l["action"] == "list" and l["client"] == "ops" for l in lines)
        assert all(l["ts"].endswith("Z") for l in lines)
        assert oct(a.audit.stat().st_mode & 0o777) == "0o600"

        # Server a dies with -9: b still has the order; PostgreSQL restarts: b reconnects, reads
        # it, and files a new call's order.
        a.kill()
        servers.remove(a)
        assert b.as_client("clerk", f"/v1/work-orders/{oid}")[0] == 200
        pg.restart()
        status, body = b.as_client("clerk", f"/v1/work-orders/{oid}")
        assert status == 200 and body["status"] == "resolved", body
        again = GrpcCall(stubs, b.channel, "shared-2", script.get("reference_time"))
        for text in script["turns"]:
            again.turn(text)
        summary = again.end()
        # The first order is resolved, so the repeat report is a new order, not a join.
        assert summary["work_order_id"] and summary["work_order_id"] != oid, summary
        status, body = b.as_client("ops", "/v1/work-orders?limit=50")
        assert {o["id"] for o in body["orders"]} == {oid, summary["work_order_id"]}, body

        # A server with the wrong Redis password refuses to start, and says why without
        # showing either password.
        with pytest.raises(RuntimeError) as refused:
            SharedServer(tmp_path, repo, pg.url,
                         redis.url.replace(REDIS_PASSWORD, "not-the-password"), name="wrong")
        message = str(refused.value)
        assert "WRONGPASS" in message and "redis://:***@" in message, message
        assert "not-the-password" not in message and REDIS_PASSWORD not in message
        for s in servers:
            assert REDIS_PASSWORD not in s.log_path.read_text()
    finally:
        for s in servers:
            assert s.stop() == 0, s.log_path.read_text()[-3000:]
        redis.stop()


def urlquote(text):
    from urllib.parse import quote
    return quote(text)
