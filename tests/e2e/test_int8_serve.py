"""INT8 served out of the box (issue 25): the real `hotline serve` with `precision: auto` and
`precision: int8` on copies of the NLU fixture model, one of them given its INT8 calibration by
`hotline calibrate` (the real command). Expected answers: the FP32 reference of
tests/fixtures/nlu/tiny_reference.json (the model's reference implementation), where the
reference is sure of its intent."""
import json
import shutil
import subprocess

import grpc
import pytest

from conftest import FIXTURE_MODEL, ROOT, ServerProcess, hotline_bin

CALFILE = "int8_calibration.json"


def head(src, dst, n):
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as g:
        for k, line in enumerate(f):
            if k >= n:
                break
            g.write(line)
    return str(dst)


def copy_fixture(root, name):
    dst = root / name
    shutil.copytree(FIXTURE_MODEL, dst, ignore=shutil.ignore_patterns("cache", CALFILE))
    lines = [l for l in (dst / "model.yaml").read_text().splitlines()
             if not l.startswith("name:")]
    (dst / "model.yaml").write_text(
        f"name: {name}\n" + "\n".join(lines) + "\nbatching: {max_batch_size: 8, "
        "max_queue_delay_ms: 2, max_queue_size: 4096}\ninstances: 1\n")
    return dst


def calibrate(model, calib, gate, *extra):
    p = subprocess.run([hotline_bin(), "calibrate", "--model", str(model), "--calib", calib,
                        "--gate", gate, "--no-tune", *extra], capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    return json.loads((model / CALFILE).read_text())


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """One repository: `calibrated` (the default gate, >= 99.5% agreement: the barely trained
    fixture keeps layers in FP32 to pass), `loose` (gated with no bar: every GEMM in INT8) and
    `plain` (no calibration)."""
    work = tmp_path_factory.mktemp("int8_repo")
    root = work / "models"
    root.mkdir()
    gate = head(ROOT / "data/hotline/test.jsonl", work / "gate.jsonl", 200)
    calib = head(ROOT / "data/hotline/calib.jsonl", work / "calib.jsonl", 100)
    docs = {"calibrated": calibrate(copy_fixture(root, "calibrated"), calib, gate),
            "loose": calibrate(copy_fixture(root, "loose"), calib, gate, "--min-intent-agreement",
                               "0", "--max-intent-drop", "100", "--max-slot-f1-drop", "100")}
    copy_fixture(root, "plain")
    return root, docs


def cpu_class():
    flags = open("/proc/cpuinfo").read()
    return "w8" if " avx512_vnni" in flags and " avx512f" in flags else "w7"


def call(stubs, target, text, model):
    with grpc.insecure_channel(target) as ch:
        return stubs.rpc.HotlineStub(ch).Understand(
            stubs.pb.UnderstandRequest(text=text, model=model), timeout=30)


class Server(ServerProcess):
    def __init__(self, workdir, repo, extra, name, models):
        self.models = models
        super().__init__(workdir, repo, extra, name=name)

    def config_body(self, repo):
        return (f"model_repository: {repo}\nstartup_models: {json.dumps(self.models)}\n"
                f"default_model: {self.models[0]}\nlog_requests: false\n")


def log_events(srv, event):
    return [json.loads(l) for l in srv.log_path.read_text().splitlines() if f'"{event}"' in l]


def sure_cases(reference):
    sure = [c for c in reference if c["confidence"] >= 0.8][:20]
    assert len(sure) >= 10
    return sure


def test_auto_picks_int8_where_the_gate_passed(stubs, tmp_path, repo, reference):
    root, docs = repo
    srv = Server(tmp_path, root, "precision: auto\n", "auto", ["calibrated", "loose", "plain"])
    try:
        chosen = {c["model"]: c for c in log_events(srv, "precision_chosen")}
        assert docs["calibrated"]["classes"][cpu_class()]["passed"]
        assert chosen["calibrated"]["precision"] == "int8", chosen
        assert "gate passed" in chosen["calibrated"]["why"], chosen
        assert chosen["plain"]["precision"] in ("fp32", "bf16"), chosen
        assert "no INT8 calibration" in chosen["plain"]["why"], chosen
        # A gate run below 99.5% agreement serves `precision: int8` but is not auto's pick.
        loose = docs["loose"]["classes"][cpu_class()]
        if loose["intent_agreement"] < 0.995:
            assert chosen["loose"]["precision"] in ("fp32", "bf16"), chosen
            assert "lower bar" in chosen["loose"]["why"], chosen
        else:
            assert chosen["loose"]["precision"] == "int8", chosen
        for case in sure_cases(reference):
            for model in ("calibrated", "plain"):
                r = call(stubs, srv.target, case["text"], model)
                assert r.result.intent == case["intent"], (model, case["text"], r.result.intent)
    finally:
        assert srv.stop() == 0


def test_precision_int8_in_the_config_loads(stubs, tmp_path, repo, reference):
    root, docs = repo
    srv = Server(tmp_path, root, "precision: int8\n", "int8", ["loose", "calibrated"])
    try:
        assert srv.alive()
        # Every GEMM of `loose` runs INT8; the FP32 reference's sure intents hold.
        assert docs["loose"]["classes"][cpu_class()]["keep_fp"] == []
        for case in sure_cases(reference):
            for model in ("loose", "calibrated"):
                r = call(stubs, srv.target, case["text"], model)
                assert r.result.intent == case["intent"], (model, case["text"], r.result.intent)
        # A folder without calibration is refused with the command to run; the server stays up.
        with grpc.insecure_channel(srv.target) as ch:
            with pytest.raises(grpc.RpcError) as e:
                ch.unary_unary("/hotline.v1.Hotline/Understand",
                               request_serializer=stubs.pb.UnderstandRequest.SerializeToString,
                               response_deserializer=stubs.pb.UnderstandResponse.FromString)(
                    stubs.pb.UnderstandRequest(text="我家停水了", model="plain"), timeout=120)
        assert "hotline calibrate" in e.value.details(), e.value.details()
        assert srv.alive()
    finally:
        assert srv.stop() == 0


class ServerWithArgs(Server):
    """`hotline serve --config FILE ARGS...`: the command line over the config."""

    def __init__(self, workdir, repo, extra, name, models, args):
        self.args = args
        super().__init__(workdir, repo, extra, name, models)

    def wait_ready(self, timeout=240):
        # Restart the process with the extra arguments (the base class started it without).
        self.proc.terminate()
        self.proc.wait()
        self.log.close()
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([hotline_bin(), "serve", "--config", str(self.config),
                                      *self.args], stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=str(self.config.parent))
        self.args = None
        super().wait_ready(timeout)


def test_serve_precision_flag_overrides_the_config(stubs, tmp_path, repo, reference):
    root, _ = repo
    srv = ServerWithArgs(tmp_path, root, "precision: fp32\n", "flag", ["calibrated"],
                         ["--precision", "auto"])
    try:
        chosen = log_events(srv, "precision_chosen")
        assert [c["precision"] for c in chosen] == ["int8"], chosen
        case = sure_cases(reference)[0]
        assert call(stubs, srv.target, case["text"], "calibrated").result.intent == case["intent"]
    finally:
        assert srv.stop() == 0
    p = subprocess.run([hotline_bin(), "serve", "--config", str(srv.config), "--precision",
                        "int4"], capture_output=True, timeout=60)
    assert p.returncode == 1 and b"unknown precision 'int4'" in p.stderr, p.stderr
