"""End to end: `hotline serve` with a joint model (the default, which the dialog would use) and a
classifier folder (a city's department dispatch) side by side in one repository. The classifier is
reached by name or by the business line it declares, over HTTP (/v1/understand), gRPC and KServe
v2. Expected answers come from tests/fixtures/nlu/tiny_classifier_reference.json (ONNX Runtime on
the same FP16-weight file, the token cut computed in Python)."""
import json
import shutil
import struct
from pathlib import Path

import grpc
import pytest

from conftest import ROOT, ServerProcess

CLASSIFIER = ROOT / "tests" / "fixtures" / "nlu" / "tiny_classifier"
JOINT = ROOT / "tests" / "fixtures" / "nlu" / "tiny_model"
CLS_REFERENCE = ROOT / "tests" / "fixtures" / "nlu" / "tiny_classifier_reference.json"


class TwoModelServer(ServerProcess):
    def config_body(self, repo):
        return (f"model_repository: {repo}\nstartup_models: [\"*\"]\ndefault_model: tiny\n"
                "log_requests: true\n")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve_cls")
    repo = work / "models"
    shutil.copytree(JOINT, repo / "tiny")
    shutil.copytree(CLASSIFIER, repo / "dispatch")
    y = repo / "dispatch" / "model.yaml"
    y.write_text(y.read_text().replace("name: tiny_classifier", "name: dispatch")
                 + "business_lines: [city_dispatch]\n")
    srv = TwoModelServer(work, repo)
    yield srv
    assert srv.stop() == 0, srv.log_path.read_text()[-4000:]


@pytest.fixture(scope="module")
def ref():
    return json.loads(CLS_REFERENCE.read_text())


def probs_by_label(case, head, labels):
    return dict(zip(labels[head], case["modes"]["head_tail"][head + "_probs"]))


@pytest.fixture(scope="module")
def labels():
    return json.loads((CLASSIFIER / "labels.json").read_text())


def check_heads(heads, case, labels):
    want = case["modes"]["head_tail"]
    assert [h["head"] for h in heads] == ["department", "category"]
    assert heads[0]["label"] == want["department"]
    assert heads[1]["label"] == want["category"]
    assert [t["label"] for t in heads[0]["top_k"]] == want["department_top_k"]
    for h in heads:
        p = probs_by_label(case, h["head"], labels)
        for t in h["top_k"]:
            assert abs(t["score"] - p[t["label"]]) < 2e-4, (t, p[t["label"]])
        assert h["score"] == h["top_k"][0]["score"]


def post(server, body):
    status, data = server.http("/v1/understand", json.dumps(body, ensure_ascii=False).encode(),
                               {"Content-Type": "application/json"})
    return status, json.loads(data)


def test_http_by_model_name(server, ref, labels):
    for case in ref["cases"]:
        status, j = post(server, {"model": "dispatch", "text": case["text"]})
        assert status == 200, j
        res = j["result"]
        check_heads(res["heads"], case, labels)
        assert res["department"] == res["heads"][0]["label"]
        assert res["intent"] == "" and res["slots"] == []
        assert res["truncated"] == case["modes"]["head_tail"]["truncated"]
        assert res["num_tokens"] == len(case["modes"]["head_tail"]["input_ids"])
        assert j["serving"]["model_name"] == "dispatch"
    assert sum(c["modes"]["head_tail"]["truncated"] for c in ref["cases"]) >= 6


def test_http_batch_and_business_line(server, ref, labels):
    cases = ref["cases"][:5]
    status, j = post(server, {"business_line": "city_dispatch",
                              "texts": [c["text"] for c in cases]})
    assert status == 200, j
    assert j["serving"]["model_name"] == "dispatch"
    for r, c in zip(j["results"], cases):
        check_heads(r["heads"], c, labels)


def test_default_model_stays_the_joint_one(server):
    status, j = post(server, {"text": "你好"})
    assert status == 200, j
    assert j["serving"]["model_name"] == "tiny"
    assert j["result"]["intent"] == "greeting" and j["result"]["heads"] == []
    models = json.loads(server.http("/v1/models")[1])["models"]
    kinds = {m["name"]: (m["kind"], m["heads"]) for m in models}
    assert kinds == {"tiny": ("joint", []), "dispatch": ("classifier", ["department", "category"])}


def test_grpc_understand(stubs, server, ref, labels):
    case = ref["cases"][-3]
    with grpc.insecure_channel(server.target) as ch:
        r = stubs.rpc.HotlineStub(ch).Understand(
            stubs.pb.UnderstandRequest(text=case["text"], model="dispatch"), timeout=30)
    heads = [{"head": h.head, "label": h.label, "score": h.score,
              "top_k": [{"label": t.label, "score": t.score} for t in h.top_k]}
             for h in r.result.heads]
    check_heads(heads, case, labels)


def unpack_bytes(raw):
    out, i = [], 0
    while i < len(raw):
        n = struct.unpack_from("<I", raw, i)[0]
        out.append(raw[i + 4:i + 4 + n].decode())
        i += 4 + n
    return out


def test_kserve(stubs, server, ref, labels):
    cases = ref["cases"][:3]
    texts = [c["text"].encode() for c in cases]
    raw = b"".join(struct.pack("<I", len(t)) + t for t in texts)
    with grpc.insecure_channel(server.target) as ch:
        k = stubs.kserve_rpc.GRPCInferenceServiceStub(ch)
        meta = k.ModelMetadata(stubs.kserve_pb.ModelMetadataRequest(name="dispatch"), timeout=10)
        assert [(o.name, o.datatype) for o in meta.outputs] == [
            ("department", "BYTES"), ("department_score", "FP32"),
            ("category", "BYTES"), ("category_score", "FP32")]
        req = stubs.kserve_pb.ModelInferRequest(model_name="dispatch", raw_input_contents=[raw])
        req.inputs.add(name="text", datatype="BYTES", shape=[3])
        r = k.ModelInfer(req, timeout=30)
        names = [o.name for o in r.outputs]
        assert names == ["department", "department_score", "category", "category_score"]
        depts = unpack_bytes(r.raw_output_contents[0])
        assert depts == [c["modes"]["head_tail"]["department"] for c in cases]
        scores = struct.unpack("<3f", r.raw_output_contents[1])
        for s, c, d in zip(scores, cases, depts):
            assert abs(s - probs_by_label(c, "department", labels)[d]) < 2e-4
        cats = unpack_bytes(r.raw_output_contents[2])
        assert cats == [c["modes"]["head_tail"]["category"] for c in cases]
        # One named output; a joint model's output name is refused with the classifier's list.
        req.outputs.add(name="category_score")
        r = k.ModelInfer(req, timeout=30)
        assert [o.name for o in r.outputs] == ["category_score"]
        req.outputs.add(name="intent")
        with pytest.raises(grpc.RpcError) as e:
            k.ModelInfer(req, timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "department_score" in e.value.details()
    assert server.alive()
