"""The Python client package (clients/python): installed with pip into a fresh virtual
environment (its setup.py generates the stubs), then used against a dialog server with TLS and
API keys: a call through Converse/EndCall, its order read, listed and updated, and the server's
refusals surfacing as grpc.RpcError codes. The example script runs against the same server."""
import hashlib
import json
import os
import ssl
import subprocess
import sys
import urllib.request

import pytest

from conftest import ROOT
from dialog_harness import DialogServer, model_repo
from test_security import certs  # noqa: F401 (the fixture: a CA and certificates by openssl)
from test_webhook import dispatch_script

KEY = "client-key-0123456789abcdef0123"
CLERK = "client-clerk-0123456789abcdef01"


class TlsDialogServer(DialogServer):
    def __init__(self, workdir, repo, certs):
        self.certs = certs
        super().__init__(workdir, repo, workdir / "orders.sqlite", name="client")

    def config_body(self, repo):
        c = self.certs
        return super().config_body(repo) + (
            f"security:\n  tls: {{cert: {c}/server.pem, key: {c}/server.key}}\n  clients:\n"
            f"  - {{name: app, key_sha256: {hashlib.sha256(KEY.encode()).hexdigest()},"
            " roles: [converse, read_orders, supervise]}\n"
            f"  - {{name: clerk, key_sha256: {hashlib.sha256(CLERK.encode()).hexdigest()},"
            " roles: [read_orders]}\n")

    def raw_http(self, path, body=None, headers=None, method=None, timeout=30):
        ctx = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
        req = urllib.request.Request(f"https://127.0.0.1:{self.http_port}{path}", data=body,
                                     headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The client installed by pip from clients/python into a folder of its own (its setup.py
    generates the stubs); the environment for a Python that uses it from there."""
    d = tmp_path_factory.mktemp("clientpkg")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation", "--target", str(d), str(ROOT / "clients" / "python")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(d.glob("hotline_client/_generated/hotline/v1/hotline_pb2_grpc.py"))
    return dict(os.environ, PYTHONPATH=str(d))


def test_the_installed_client_against_a_tls_server(tmp_path, certs, installed):  # noqa: F811
    srv = TlsDialogServer(tmp_path, model_repo(tmp_path / "models"), certs)
    try:
        script = f"""
import json, grpc
from hotline_client import Client
out = {{}}
with Client("{srv.target}", key="{KEY}", ca="{certs}/ca.pem") as c:
    turns = [c.converse("client-1", t) for t in {json.dumps(dispatch_script()["turns"], ensure_ascii=False)}]
    out["turns"] = turns
    out["summary"] = c.end_call("client-1")
    oid = out["summary"]["work_order_id"]
    out["order"] = c.work_order(oid) if oid else None
    out["listed"] = [o["id"] for o in c.work_orders(status="open")]
    out["updated"] = c.update_work_order(oid, status="in_progress", note="已派单") if oid else None
with Client("{srv.target}", key="{CLERK}", ca="{certs}/ca.pem") as c:
    try:
        c.work_orders()
    except grpc.RpcError as e:
        out["clerk_list"] = e.code().name
with Client("{srv.target}", ca="{certs}/ca.pem") as c:
    try:
        c.models()
    except grpc.RpcError as e:
        out["no_key"] = e.code().name
print(json.dumps(out, ensure_ascii=False))
"""
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=120, cwd=str(tmp_path), env=installed)
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads(r.stdout)
        assert all(t["reply"] for t in out["turns"])
        oid = out["summary"]["work_order_id"]
        assert oid and out["summary"]["outcome"] == "dispatch", out["summary"]
        # The same order as the server's HTTP API gives.
        status, body = srv.http(f"/v1/work-orders/{oid}", headers={"X-API-Key": CLERK})
        assert status == 200
        assert out["order"]["id"] == oid and out["order"]["caller_text"] == body["caller_text"]
        assert oid in out["listed"]
        assert out["updated"]["status"] == "in_progress"
        assert out["updated"]["notes"][0]["by"] == "app"
        assert out["clerk_list"] == "PERMISSION_DENIED"
        assert out["no_key"] == "UNAUTHENTICATED"
        # The example script, from the checkout, against the same server.
        ex = subprocess.run([sys.executable, str(ROOT / "clients" / "python" / "example.py"),
                             "--target", srv.target, "--key", KEY, "--ca",
                             str(certs / "ca.pem")], capture_output=True, text=True, timeout=120)
        assert ex.returncode == 0, ex.stderr[-3000:]
        assert "outcome:" in ex.stdout
    finally:
        assert srv.stop() == 0
