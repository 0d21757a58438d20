"""End to end, who may call the server: TLS (and mutual TLS) on gRPC and HTTP, API keys with
roles, rate limits, the refusal to expose a non-loopback port in clear, gRPC reflection off by
default, and a held port being an error. Certificates are made here with openssl; clients are
grpcio (stubs generated from our proto) and curl, each trusting only the test's CA. Methods are
enumerated from the proto descriptors, not from a list of ours."""
import hashlib
import json
import socket
import ssl
import subprocess
import time
import urllib.request

import grpc
import pytest

from conftest import ServerProcess, free_ports, hotline_bin, make_repo

KEYS = {  # client name -> (key, roles, extra config)
    "reader": ("understand-key-0123456789abcdef", ["understand"], ""),
    "orders": ("orders-key-0123456789abcdef0123", ["read_orders"], ""),
    "boss": ("supervise-key-0123456789abcdef01", ["supervise", "converse"], ""),
    "root": ("admin-key-0123456789abcdef012345", ["admin"], ""),
    "slow": ("slow-key-0123456789abcdef0123456", ["understand"],
             "    rate_limit: {per_second: 0.2, burst: 3}\n"),
}


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1/localhost, a client certificate from the same CA
    and one from a stranger's CA."""
    d = tmp_path_factory.mktemp("certs")
    for ca in ["ca", "rogue_ca"]:
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                f"/CN=hotline test {ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                               "extendedKeyUsage=serverAuth,clientAuth\n")
    for name, ca in [("server", "ca"), ("client", "ca"), ("rogue", "rogue_ca")]:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
                f"{name}.key", "-out", f"{name}.csr", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", f"{name}.pem",
                cwd=d)
    return d


def security_yaml(certs, mtls=False, clients=True, extra=""):
    out = (f"security:\n  tls: {{cert: {certs}/server.pem, key: {certs}/server.key, "
           f"ca: {certs}/ca.pem, client_auth: {'require' if mtls else 'none'}}}\n" + extra)
    if clients:
        out += "  clients:\n"
        for name, (key, roles, more) in KEYS.items():
            out += (f"  - name: {name}\n    key_sha256: {hashlib.sha256(key.encode()).hexdigest()}\n"
                    f"    roles: [{', '.join(roles)}]\n" + more)
    return out


class TlsServer(ServerProcess):
    """`hotline serve` with TLS and API keys; probes /readyz over HTTPS trusting the test CA."""

    def __init__(self, workdir, repo, certs, mtls=False, name="tls"):
        self.certs, self.mtls = certs, mtls
        super().__init__(workdir, repo, extra_config=security_yaml(certs, mtls), name=name)

    def ssl_context(self, client_cert=True):
        ctx = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
        if self.mtls and client_cert:
            ctx.load_cert_chain(str(self.certs / "client.pem"), str(self.certs / "client.key"))
        return ctx

    def raw_http(self, path, body=None, headers=None, method=None, timeout=30):
        req = urllib.request.Request(f"https://127.0.0.1:{self.http_port}{path}", data=body,
                                     headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context()) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def channel(self, client_cert=True, ca="ca.pem"):
        kw = {"root_certificates": (self.certs / ca).read_bytes()}
        if client_cert:
            kw["private_key"] = (self.certs / "client.key").read_bytes()
            kw["certificate_chain"] = (self.certs / "client.pem").read_bytes()
        return grpc.secure_channel(self.target, grpc.ssl_channel_credentials(**kw))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("secrepo") / "models")


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory, repo, certs):
    srv = TlsServer(tmp_path_factory.mktemp("tls"), repo, certs)
    yield srv
    assert srv.stop() == 0, srv.log_path.read_text()[-3000:]


def auth(name):
    return (("authorization", f"Bearer {KEYS[name][0]}"),)


def code_of(fn):
    try:
        fn()
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


def every_method(stubs):
    """(full method path, request class) of every unary method of hotline.v1.Hotline and
    inference.GRPCInferenceService, read from the generated descriptors."""
    out = []
    for pb in [stubs.pb, stubs.kserve_pb]:
        for service in pb.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                if not m.client_streaming and not m.server_streaming:
                    out.append((f"/{service.full_name}/{m.name}", m.input_type))
    return out


def test_every_grpc_method_needs_a_valid_key(stubs, tls_server):
    methods = every_method(stubs)
    assert len(methods) >= 14, [m for m, _ in methods]
    with tls_server.channel(client_cert=False) as ch:
        for path, _ in methods:
            call = ch.unary_unary(path, request_serializer=None, response_deserializer=None)
            assert code_of(lambda: call(b"", timeout=10)) == grpc.StatusCode.UNAUTHENTICATED, path
            bad = (("authorization", "Bearer not-a-key-of-anyone-here"),)
            assert code_of(lambda: call(b"", timeout=10, metadata=bad)) == \
                grpc.StatusCode.UNAUTHENTICATED, path
            # Off by one character: still refused.
            near = (("x-api-key", KEYS["root"][0][:-1] + "X"),)
            assert code_of(lambda: call(b"", timeout=10, metadata=near)) == \
                grpc.StatusCode.UNAUTHENTICATED, path
        # The orchestrator's probe stays open.
        health = stubs.health_rpc.HealthStub(ch)
        r = health.Check(stubs.health_pb.HealthCheckRequest(service=""), timeout=10)
        assert r.status == stubs.health_pb.HealthCheckResponse.SERVING


def test_roles_decide_what_a_key_may_call(stubs, tls_server):
    with tls_server.channel(client_cert=False) as ch:
        stub = stubs.rpc.HotlineStub(ch)
        r = stub.Understand(stubs.pb.UnderstandRequest(text="我家停水了"), timeout=30,
                            metadata=auth("reader"))
        assert r.result.intent
        # x-api-key works as well as a bearer token.
        r = stub.Understand(stubs.pb.UnderstandRequest(text="我家停水了"), timeout=30,
                            metadata=(("x-api-key", KEYS["reader"][0]),))
        assert r.result.intent
        get = lambda who: stub.GetWorkOrder(stubs.pb.GetWorkOrderRequest(id="WO1"), timeout=10,
                                            metadata=auth(who))
        assert code_of(lambda: get("reader")) == grpc.StatusCode.PERMISSION_DENIED
        # A reader of orders passes the check; this server has no dialog, so it is UNIMPLEMENTED.
        assert code_of(lambda: get("orders")) == grpc.StatusCode.UNIMPLEMENTED
        assert code_of(lambda: stub.Understand(stubs.pb.UnderstandRequest(text="x"), timeout=10,
                                               metadata=auth("orders"))) == \
            grpc.StatusCode.PERMISSION_DENIED
        unload = lambda who: stub.UnloadModel(
            stubs.pb.UnloadModelRequest(name="tiny_small_queue", admin_token="wrong"),
            timeout=10, metadata=auth(who))
        assert code_of(lambda: unload("boss")) == grpc.StatusCode.PERMISSION_DENIED
        # admin passes the role check and then meets the model admin token check.
        assert code_of(lambda: unload("root")) == grpc.StatusCode.PERMISSION_DENIED
        kserve = stubs.kserve_rpc.GRPCInferenceServiceStub(ch)
        assert kserve.ServerReady(stubs.kserve_pb.ServerReadyRequest(), timeout=10,
                                  metadata=auth("root")).ready


def curl(*args):
    r = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", *args],
                       capture_output=True, text=True, timeout=60)
    body, _, status = r.stdout.rpartition("\n")
    return r.returncode, int(status or 0), body


def test_curl_over_https_with_keys(tls_server, certs):
    base = f"https://127.0.0.1:{tls_server.http_port}"
    ca = ["--cacert", str(certs / "ca.pem")]
    data = ["-H", "Content-Type: application/json", "-d", json.dumps({"text": "我家停水了"})]
    rc, status, body = curl(*ca, *data, f"{base}/v1/understand")
    assert (rc, status) == (0, 401), body
    assert json.loads(body)["code"] == "UNAUTHENTICATED"
    rc, status, body = curl(*ca, "-i", *data, f"{base}/v1/understand")
    assert "www-authenticate: bearer" in body.lower()
    rc, status, body = curl(*ca, *data, "-H", f"Authorization: Bearer {KEYS['reader'][0]}",
                            f"{base}/v1/understand")
    assert (rc, status) == (0, 200), body
    assert json.loads(body)["result"]["intent"]
    # Every route but the probes needs a key, unknown ones included.
    for path in ["/v1/models", "/metrics", "/v1/work-orders/WO1", "/v1/work-orders",
                 "/no/such/route", "/openapi.json"]:
        assert curl(*ca, base + path)[1] == 401, path
    for path in ["/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"]:
        assert curl(*ca, base + path)[1] == 200, path
    assert curl(*ca, "-H", f"X-API-Key: {KEYS['reader'][0]}", f"{base}/metrics")[1] == 403
    rc, status, body = curl(*ca, "-H", f"X-API-Key: {KEYS['boss'][0]}", f"{base}/metrics")
    assert status == 200 and "hotline_" in body
    # Without the CA curl refuses the certificate; plain HTTP on the TLS port gets no answer.
    assert curl(f"{base}/healthz")[0] == 60
    assert curl(f"http://127.0.0.1:{tls_server.http_port}/healthz")[1] != 200


def test_rate_limit_per_client(stubs, tls_server):
    with tls_server.channel(client_cert=False) as ch:
        stub = stubs.rpc.HotlineStub(ch)
        codes = [code_of(lambda: stub.ListModels(stubs.pb.ListModelsRequest(), timeout=10,
                                                 metadata=auth("slow"))) for _ in range(5)]
        assert codes[:3] == [grpc.StatusCode.OK] * 3, codes
        assert codes[3:] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2, codes
        # Another client is not slowed by it.
        assert code_of(lambda: stub.ListModels(stubs.pb.ListModelsRequest(), timeout=10,
                                               metadata=auth("reader"))) == grpc.StatusCode.OK
    status, body = tls_server.raw_http("/v1/models", headers={"X-API-Key": KEYS["slow"][0]})
    assert status == 429 and json.loads(body)["code"] == "RESOURCE_EXHAUSTED"


def test_mutual_tls(stubs, tmp_path, repo, certs):
    srv = TlsServer(tmp_path, repo, certs, mtls=True, name="mtls")
    try:
        req = stubs.pb.ListModelsRequest()
        with srv.channel(client_cert=True) as ch:
            stub = stubs.rpc.HotlineStub(ch)
            assert stub.ListModels(req, timeout=10, metadata=auth("reader")).models
        with srv.channel(client_cert=False) as ch:
            stub = stubs.rpc.HotlineStub(ch)
            assert code_of(lambda: stub.ListModels(req, timeout=5, metadata=auth("reader"))) == \
                grpc.StatusCode.UNAVAILABLE
        base = f"https://127.0.0.1:{srv.http_port}"
        ca = ["--cacert", str(certs / "ca.pem")]
        key = ["-H", f"X-API-Key: {KEYS['reader'][0]}"]
        assert curl(*ca, *key, f"{base}/v1/models")[0] != 0  # no client certificate
        rogue = ["--cert", str(certs / "rogue.pem"), "--key", str(certs / "rogue.key")]
        assert curl(*ca, *key, *rogue, f"{base}/v1/models")[0] != 0
        mine = ["--cert", str(certs / "client.pem"), "--key", str(certs / "client.key")]
        assert curl(*ca, *key, *mine, f"{base}/v1/models")[1] == 200
    finally:
        assert srv.stop() == 0


def start_and_wait(config, workdir, timeout=60):
    path = workdir / "refused.yaml"
    path.write_text(config)
    t0 = time.time()
    r = subprocess.run([hotline_bin(), "serve", "--config", str(path)], capture_output=True,
                       text=True, timeout=timeout, cwd=str(workdir))
    return r.returncode, r.stdout + r.stderr, time.time() - t0


def test_non_loopback_in_clear_is_refused(tmp_path, repo, certs):
    g, h = free_ports(2)
    base = (f"host: 0.0.0.0\ngrpc_port: {g}\nhttp_port: {h}\nmodel_repository: {repo}\n"
            f"startup_models: [tiny]\n")
    rc, out, _ = start_and_wait(base, tmp_path)
    assert rc != 0 and "security.insecure" in out and "0.0.0.0" in out, out
    # TLS without keys is still refused.
    rc, out, _ = start_and_wait(base + security_yaml(certs, clients=False), tmp_path)
    assert rc != 0 and "no clients" in out, out
    # Reflection answers without a key: refused together with clients.
    rc, out, _ = start_and_wait(
        f"grpc_port: 0\nhttp_port: 0\nmodel_repository: {repo}\nstartup_models: [tiny]\n"
        + security_yaml(certs, extra="  reflection: true\n"),
        tmp_path)
    assert rc != 0 and "reflection" in out, out


def test_insecure_must_be_said_and_reflection_is_off_by_default(stubs, tmp_path, repo):
    srv = ServerProcess(tmp_path, repo, name="open",
                        extra_config="security: {insecure: true}\n")
    on = ServerProcess(tmp_path, repo, name="reflect",
                       extra_config="security: {reflection: true}\n")
    try:
        for s, enabled in [(srv, False), (on, True)]:
            with grpc.insecure_channel(s.target) as ch:
                # Server reflection, raw: ServerReflectionRequest{list_services: ""} is field 7.
                reflect = ch.stream_stream(
                    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                    request_serializer=None, response_deserializer=None)
                if enabled:
                    replies = list(reflect(iter([b"\x3a\x00"]), timeout=10))
                    assert b"hotline.v1.Hotline" in replies[0]
                    assert b"inference.GRPCInferenceService" in replies[0]
                else:
                    assert code_of(lambda: list(reflect(iter([b"\x3a\x00"]), timeout=10))) == \
                        grpc.StatusCode.UNIMPLEMENTED
    finally:
        assert srv.stop() == 0
        assert on.stop() == 0


def test_a_held_port_is_an_error_naming_it(tmp_path, repo):
    first = ServerProcess(tmp_path, repo, name="first")
    try:
        for g, h, port in [(first.grpc_port, free_ports(1)[0], first.grpc_port),
                           (free_ports(1)[0], first.http_port, first.http_port)]:
            rc, out, secs = start_and_wait(
                f"grpc_port: {g}\nhttp_port: {h}\nmodel_repository: {repo}\n"
                f"startup_models: [tiny]\n", tmp_path)
            assert rc != 0 and f"port {port} is in use" in out, out
            assert secs < 20, f"took {secs:.1f}s to give up"
        assert first.alive() and first.raw_http("/readyz")[0] == 200
    finally:
        assert first.stop() == 0


def test_bad_security_configs_are_clear_errors(tmp_path, repo, certs):
    base = f"grpc_port: 0\nhttp_port: 0\nmodel_repository: {repo}\nstartup_models: [tiny]\n"
    digest = hashlib.sha256(b"some-key-0123456789abcdef").hexdigest()
    cases = [
        (f"security:\n  clients:\n  - {{name: a, key_sha256: {digest}, roles: [superuser]}}\n",
         "unknown role 'superuser'"),
        ("security:\n  clients:\n  - {name: a, key_env: HOTLINE_TEST_NO_SUCH_VAR, "
         "roles: [understand]}\n", "HOTLINE_TEST_NO_SUCH_VAR is unset"),
        (f"security:\n  clients:\n  - {{name: a, key_sha256: {digest}, roles: [understand]}}\n"
         f"  - {{name: b, key_sha256: {digest}, roles: [admin]}}\n", "have the same key"),
        (f"security:\n  clients:\n  - {{name: a, roles: [understand]}}\n",
         "exactly one of key_sha256, key_file, key_env"),
        (f"security:\n  tls: {{cert: {certs}/server.pem}}\n", "needs both cert and key"),
        (f"security:\n  tls: {{cert: {certs}/server.pem, key: {certs}/server.key, "
         "client_auth: require}\n", "require needs ca"),
        ("security:\n  colour: blue\n", "unknown key 'colour'"),
    ]
    for extra, want in cases:
        rc, out, secs = start_and_wait(base + extra, tmp_path)
        assert rc != 0 and want in out, (want, out)
        assert secs < 20


def test_keys_from_a_file_and_the_environment(stubs, tmp_path, repo, monkeypatch):
    (tmp_path / "ops.key").write_text("file-key-0123456789abcdef\n")
    monkeypatch.setenv("HOTLINE_TEST_KEY", "env-key-0123456789abcdef")
    srv = ServerProcess(tmp_path, repo, name="keys", extra_config=(
        "security:\n  clients:\n"
        f"  - {{name: f, key_file: {tmp_path / 'ops.key'}, roles: [understand]}}\n"
        "  - {name: e, key_env: HOTLINE_TEST_KEY, roles: [understand]}\n"))
    try:
        with grpc.insecure_channel(srv.target) as ch:
            stub = stubs.rpc.HotlineStub(ch)
            req = stubs.pb.ListModelsRequest()
            for key in ["file-key-0123456789abcdef", "env-key-0123456789abcdef"]:
                assert stub.ListModels(req, timeout=10,
                                       metadata=(("x-api-key", key),)).models
            assert code_of(lambda: stub.ListModels(req, timeout=10, metadata=(
                ("x-api-key", "file-key-0123456789abcdeX"),))) == grpc.StatusCode.UNAUTHENTICATED
    finally:
        assert srv.stop() == 0
