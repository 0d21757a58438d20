"""End to end: the real `hotline serve` binary with the real NLU pipeline (the fixture model),
driven by clients we did not write: grpcio with stubs generated from our proto, urllib, Prometheus
and promtool. Expected answers come from tests/fixtures/nlu/tiny_reference.json (computed by the
model's reference implementation, independently of the engine)."""
import json
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
import yaml

from conftest import ADMIN_TOKEN, FIXTURE_MODEL, ServerProcess, make_repo, metric_value


def call(stubs, target, text="", model="", timeout=30, **kw):
    with grpc.insecure_channel(target) as ch:
        stub = stubs.rpc.HotlineStub(ch)
        return stub.Understand(stubs.pb.UnderstandRequest(text=text, model=model, **kw),
                               timeout=timeout)


def bytes_tensor(raw):
    """The strings of a KServe BYTES tensor (4-byte little-endian length before each)."""
    import struct
    out, i = [], 0
    while i < len(raw):
        n = struct.unpack_from("<I", raw, i)[0]
        out.append(raw[i + 4:i + 4 + n].decode())
        i += 4 + n
    return out


def code_of(fn):
    try:
        fn()
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


def assert_serving(stubs, server):
    assert server.alive()
    r = call(stubs, server.target, "朝阳区建国路88号工地晚上十一点还在打桩")
    assert r.result.intent


def test_health_and_reflection(stubs, server):
    with grpc.insecure_channel(server.target) as ch:
        health = stubs.health_rpc.HealthStub(ch)
        for service in ["", "hotline.v1.Hotline", "inference.GRPCInferenceService"]:
            r = health.Check(stubs.health_pb.HealthCheckRequest(service=service), timeout=10)
            assert r.status == stubs.health_pb.HealthCheckResponse.SERVING, service
        # Server reflection is off unless the config turns it on (tests/e2e/test_security.py).
        reflect = ch.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as e:
            list(reflect(iter([b"\x3a\x00"]), timeout=10))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert server.http("/healthz")[0] == 200
    assert server.http("/readyz")[0] == 200
    assert server.http("/v2/health/live")[0] == 200
    assert server.http("/v2/health/ready")[0] == 200


def test_2000_requests_from_32_callers_answered_correctly(stubs, server, reference):
    before = server.metrics()
    inf0 = metric_value(before, "hotline_inference_count_total", model="tiny") or 0
    exe0 = metric_value(before, "hotline_execution_count_total", model="tiny") or 0
    channel = grpc.insecure_channel(server.target)
    stub = stubs.rpc.HotlineStub(channel)

    def one(i):
        ref = reference[i % len(reference)]
        r = stub.Understand(stubs.pb.UnderstandRequest(text=ref["text"], request_id=str(i)),
                            timeout=60)
        return i, ref, r

    wrong = []
    with ThreadPoolExecutor(32) as pool:
        for i, ref, r in pool.map(one, range(2000)):
            if (r.result.intent != ref["intent"] or abs(r.result.confidence - ref["confidence"]) > 2e-3
                    or r.request_id != str(i)):
                wrong.append((i, ref["text"], r.result.intent, ref["intent"], r.result.confidence))
    channel.close()
    assert not wrong, f"{len(wrong)} wrong answers, first: {wrong[:3]}"
    after = server.metrics()
    inferences = metric_value(after, "hotline_inference_count_total", model="tiny") - inf0
    executions = metric_value(after, "hotline_execution_count_total", model="tiny") - exe0
    assert inferences == 2000
    assert executions < inferences, "no batching happened"
    assert metric_value(after, "hotline_model_state", model="tiny", state="ready") == 1


def test_batch_call_and_http_mirror(stubs, server, reference):
    texts = [r["text"] for r in reference[:5]]
    with grpc.insecure_channel(server.target) as ch:
        r = stubs.rpc.HotlineStub(ch).UnderstandBatch(
            stubs.pb.UnderstandBatchRequest(texts=texts), timeout=30)
    assert [u.intent for u in r.results] == [x["intent"] for x in reference[:5]]
    # Category id and name beside intent and department, as the model's taxonomy file says.
    tax = yaml.safe_load((FIXTURE_MODEL / "taxonomy.yaml").read_text(encoding="utf-8"))
    info = {i["id"]: i for i in tax["intents"]}
    for u in r.results:
        assert u.department == info[u.intent]["dept"]
        assert u.category == info[u.intent]["category"]
        assert u.category_name == tax["categories"][u.category]
    assert r.serving.model_name == "tiny"
    status, body = server.http("/v1/understand", json.dumps({"text": texts[0]}).encode(),
                               {"Content-Type": "application/json"})
    assert status == 200, body
    j = json.loads(body)
    assert j["result"]["intent"] == reference[0]["intent"]
    assert j["result"]["category"] == info[reference[0]["intent"]]["category"]
    assert j["result"]["category_name"] == tax["categories"][j["result"]["category"]]
    assert j["serving"]["model_name"] == "tiny"


def test_bad_input_keeps_server_up_with_the_right_code(stubs, server):
    t = server.target
    # Empty text is valid: the pipeline answers with confidence 0.
    r = call(stubs, t, "")
    assert r.result.confidence == 0
    assert code_of(lambda: call(stubs, t, "投" * 350_000)) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: call(stubs, t, "x", model="no_such_model")) == grpc.StatusCode.NOT_FOUND
    # 5 MB is over the 4 MiB message limit: gRPC itself refuses it.
    assert code_of(lambda: call(stubs, t, "x" * (5 << 20))) == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Expired deadlines. gRPC keeps deadlines in whole milliseconds, so a lone call with a 1 µs
    # timeout can still be answered in time by this fast fixture model; of 64 such calls at once,
    # some must expire or be refused at admission (the work queued ahead of them would end after
    # their deadline: RESOURCE_EXHAUSTED), and none may end otherwise.
    with grpc.insecure_channel(t) as ch:
        stub = stubs.rpc.HotlineStub(ch)
        futures = [stub.Understand.future(stubs.pb.UnderstandRequest(text="明天早上" * 10),
                                          timeout=1e-6) for _ in range(64)]
        codes = [f.code() for f in futures]
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED,
                          grpc.StatusCode.RESOURCE_EXHAUSTED}, set(codes)
    assert set(codes) != {grpc.StatusCode.OK}
    # Invalid UTF-8 cannot be sent through generated stubs; send hand-encoded bytes
    # (field 1, length 4, "a\xff\xfeb").
    with grpc.insecure_channel(t) as ch:
        raw = ch.unary_unary("/hotline.v1.Hotline/Understand", request_serializer=None,
                             response_deserializer=None)
        assert code_of(lambda: raw(b"\x0a\x04a\xff\xfeb", timeout=10)) == \
            grpc.StatusCode.INVALID_ARGUMENT
        # Cancelled calls: the client gives up, the server carries on.
        stub = stubs.rpc.HotlineStub(ch)
        futures = [stub.Understand.future(stubs.pb.UnderstandRequest(text="路灯坏了" * 10))
                   for _ in range(20)]
        for f in futures:
            f.cancel()
        for f in futures:
            assert f.cancelled() or f.code() == grpc.StatusCode.OK
    # HTTP: malformed JSON, invalid UTF-8 inside JSON, unknown model, empty batch.
    for body, want in [(b'{"text": ', 400), (b'{"text": "a\xff"}', 400),
                       (b'{"text": "x", "model": "no_such_model"}', 404), (b'{"texts": []}', 400),
                       (b'{"text": "x"}', 200)]:
        status, reply = server.http("/v1/understand", body, {"Content-Type": "application/json"})
        assert status == want, (body, status, reply)
        if want != 200:
            assert json.loads(reply)["message"]
    status, _ = server.http("/v1/understand", b'{"text": "x"}', {"X-Timeout-Ms": "0"})
    assert status == 504
    assert_serving(stubs, server)
    m = server.metrics()
    assert metric_value(m, "hotline_requests_total", model="tiny", intent="",
                        code="INVALID_ARGUMENT") >= 1
    assert metric_value(m, "hotline_requests_total", model="-", intent="", code="NOT_FOUND") >= 1


def test_queue_flood_answers_resource_exhausted(stubs, server):
    with grpc.insecure_channel(server.target) as ch:
        stub = stubs.rpc.HotlineStub(ch)
        futures = [stub.Understand.future(stubs.pb.UnderstandRequest(
            text="小区电梯困人了快来人" * 6, model="tiny_small_queue"), timeout=60)
            for _ in range(300)]
        codes = []
        for f in futures:
            try:
                f.result()
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, set(codes)
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) > 0
    assert codes.count(grpc.StatusCode.OK) > 0
    assert_serving(stubs, server)


def test_admin_calls_need_the_token(stubs, server):
    with grpc.insecure_channel(server.target) as ch:
        stub = stubs.rpc.HotlineStub(ch)
        assert code_of(lambda: stub.LoadModel(stubs.pb.LoadModelRequest(name="tiny"),
                                              timeout=60)) == grpc.StatusCode.UNAUTHENTICATED
        assert code_of(lambda: stub.UnloadModel(
            stubs.pb.UnloadModelRequest(name="tiny", admin_token="wrong"),
            timeout=60)) == grpc.StatusCode.PERMISSION_DENIED
        r = stub.LoadModel(stubs.pb.LoadModelRequest(name="tiny", admin_token=ADMIN_TOKEN),
                           timeout=120)
        assert r.model.state == "ready"
        models = {m.name: m for m in stub.ListModels(stubs.pb.ListModelsRequest(), timeout=10).models}
        assert models["tiny"].state == "ready" and models["tiny_small_queue"].state == "ready"
    assert_serving(stubs, server)


def test_kserve_v2_with_generated_stubs(stubs, server, reference):
    import struct
    texts = [r["text"].encode() for r in reference[:3]]
    raw = b"".join(struct.pack("<I", len(t)) + t for t in texts)
    with grpc.insecure_channel(server.target) as ch:
        k = stubs.kserve_rpc.GRPCInferenceServiceStub(ch)
        assert k.ServerLive(stubs.kserve_pb.ServerLiveRequest(), timeout=10).live
        assert k.ServerReady(stubs.kserve_pb.ServerReadyRequest(), timeout=10).ready
        assert k.ModelReady(stubs.kserve_pb.ModelReadyRequest(name="tiny"), timeout=10).ready
        meta = k.ModelMetadata(stubs.kserve_pb.ModelMetadataRequest(name="tiny"), timeout=10)
        assert [i.name for i in meta.inputs] == ["text"]
        req = stubs.kserve_pb.ModelInferRequest(model_name="tiny", raw_input_contents=[raw])
        req.inputs.add(name="text", datatype="BYTES", shape=[3])
        r = k.ModelInfer(req, timeout=30)
        for name in ("intent", "department", "category", "category_name"):
            req.outputs.add(name=name)
        named = k.ModelInfer(req, timeout=30)
    tax = yaml.safe_load((FIXTURE_MODEL / "taxonomy.yaml").read_text(encoding="utf-8"))
    info = {i["id"]: i for i in tax["intents"]}
    cols = {o.name: bytes_tensor(c) for o, c in zip(named.outputs, named.raw_output_contents)}
    assert cols["intent"] == [x["intent"] for x in reference[:3]]
    assert cols["department"] == [info[x["intent"]]["dept"] for x in reference[:3]]
    assert cols["category"] == [info[x["intent"]]["category"] for x in reference[:3]]
    assert cols["category_name"] == [tax["categories"][c] for c in cols["category"]]
    names = [o.name for o in r.outputs]
    out = r.raw_output_contents[names.index("intent")]
    intents, i = [], 0
    while i < len(out):
        n = struct.unpack_from("<I", out, i)[0]
        intents.append(out[i + 4:i + 4 + n].decode())
        i += 4 + n
    assert intents == [x["intent"] for x in reference[:3]]
    conf = struct.unpack("<3f", r.raw_output_contents[names.index("confidence")])
    assert all(abs(c - x["confidence"]) < 2e-3 for c, x in zip(conf, reference[:3]))


TRITON_CLIENT = r"""
import json, sys
try:
    import tritonclient.grpc as tc
except Exception as e:  # e.g. its generated stubs need a newer grpcio than requirements.txt pins
    print(f"{type(e).__name__}: {e}")
    sys.exit(77)
import numpy as np
target, ref = sys.argv[1], json.loads(sys.argv[2])
client = tc.InferenceServerClient(target)
assert client.is_server_live() and client.is_server_ready()
assert client.is_model_ready("tiny")
assert client.get_model_metadata("tiny").inputs[0].name == "text"
inp = tc.InferInput("text", [len(ref)], "BYTES")
inp.set_data_from_numpy(np.array([r["text"].encode() for r in ref], dtype=np.object_))
result = client.infer("tiny", [inp])
intents = [x.decode() for x in result.as_numpy("intent")]
assert intents == [r["intent"] for r in ref], intents
conf = result.as_numpy("confidence")
assert all(abs(float(c) - r["confidence"]) < 2e-3 for c, r in zip(conf, ref)), conf
assert all(isinstance(json.loads(x), list) for x in result.as_numpy("slots"))
print("ok")
"""


def test_kserve_v2_with_tritonclient(server, reference):
    # A separate interpreter: tritonclient registers its own "inference" protos, which would
    # clash with the stubs this process generated from ours.
    import sys
    ref = [{"text": r["text"], "intent": r["intent"], "confidence": r["confidence"]}
           for r in reference[:4]]
    p = subprocess.run([sys.executable, "-c", TRITON_CLIENT, server.target, json.dumps(ref)],
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 77:
        pytest.skip(f"tritonclient cannot be imported: {p.stdout.strip()}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().endswith("ok")


def test_prometheus_scrapes_and_promtool_accepts(server, tmp_path):
    text = server.metrics()
    check = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                           capture_output=True, timeout=60)
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
    from conftest import free_port
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: hotline\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{server.http_port}']}}]\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={cfg}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import urllib.parse
        import urllib.request
        deadline = time.time() + 60
        found = None
        while time.time() < deadline and not found:
            time.sleep(1)
            try:
                q = urllib.parse.quote('hotline_inference_count_total{job="hotline",model="tiny"}')
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query={q}",
                                            timeout=5) as r:
                    res = json.loads(r.read())["data"]["result"]
                if res:
                    found = res
            except OSError:
                pass
        assert found, "Prometheus never scraped hotline_inference_count_total"
        assert float(found[0]["value"][1]) > 0
    finally:
        prom.terminate()
        prom.wait(timeout=30)


def test_sigterm_answers_in_flight_then_exits(stubs, tmp_path):
    srv = ServerProcess(tmp_path, make_repo(tmp_path / "models"))
    results = []
    lock = threading.Lock()
    with grpc.insecure_channel(srv.target) as ch:
        stub = stubs.rpc.HotlineStub(ch)
        futures = [stub.Understand.future(stubs.pb.UnderstandRequest(text="噪音扰民" * 8),
                                          timeout=60) for _ in range(64)]
        time.sleep(0.05)
        rc = srv.stop(timeout=60)
        for f in futures:
            try:
                f.result()
                results.append("OK")
            except grpc.RpcError as e:
                results.append(e.code().name)
    assert rc == 0, srv.log_path.read_text()[-3000:]
    # Everything admitted before the shutdown was answered; later calls were refused cleanly.
    assert set(results) <= {"OK", "UNAVAILABLE"}, results
    assert "OK" in results
    log = srv.log_path.read_text()
    assert '"event":"stopped"' in log


def _cpu_grants_amx_bf16():
    """Independently of the engine's CPUID code: /proc/cpuinfo's flags and the kernel's AMX
    permission (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA)."""
    import ctypes
    import platform
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split()
    except (OSError, StopIteration):
        return False
    if not {"amx_bf16", "amx_tile", "avx512_bf16"} <= set(flags):
        return False
    if platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18
    return libc.syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0


def test_precision_auto_picks_bf16_only_where_the_cpu_has_amx(stubs, tmp_path, reference):
    """config `precision: auto`: the server logs its choice per model (bf16 on an AMX-BF16 CPU,
    else fp32) and answers like the FP32 reference."""
    srv = ServerProcess(tmp_path, make_repo(tmp_path / "models"), "precision: auto\n",
                        name="auto")
    try:
        assert_serving(stubs, srv)
        chosen = [json.loads(l) for l in srv.log_path.read_text().splitlines()
                  if '"precision_chosen"' in l]
        assert {c["model"] for c in chosen} == {"tiny", "tiny_small_queue"}, chosen
        want = "bf16" if _cpu_grants_amx_bf16() else "fp32"
        assert all(c["precision"] == want and c["requested"] == "auto" for c in chosen), chosen
        # The FP32 reference's intents where it is not near a tie (BF16 moves logits ~1e-2).
        sure = [c for c in reference if c["confidence"] >= 0.6][:20]
        assert len(sure) >= 10
        for case in sure:
            r = call(stubs, srv.target, case["text"], model="tiny")
            assert r.result.intent == case["intent"], (case["text"], r.result.intent)
    finally:
        srv.stop()
