"""Fixtures for the end-to-end tests: the real `hotline serve` binary on free ports, with a
repository made of copies of the NLU fixture model, and Python gRPC stubs generated from our protos
at test time (grpcio's own code, not ours)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_MODEL = ROOT / "tests" / "fixtures" / "nlu" / "tiny_model"
REFERENCE = ROOT / "tests" / "fixtures" / "nlu" / "tiny_reference.json"
ADMIN_TOKEN = "e2e-admin-token"

# grpc.health.v1 as published by the gRPC project (grpc/src/proto/grpc/health/v1/health.proto).
HEALTH_PROTO = """
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health {
  rpc Check(HealthCheckRequest) returns (HealthCheckResponse);
  rpc Watch(HealthCheckRequest) returns (stream HealthCheckResponse);
}
"""


def hotline_bin():
    path = os.environ.get("HOTLINE_BIN", str(ROOT / "build" / "hotline"))
    if not os.path.exists(path):
        raise RuntimeError(f"hotline binary not found at {path}; set HOTLINE_BIN")
    return path


def free_ports(n):
    """n distinct free ports (all sockets held open together, so no two are the same)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port():
    return free_ports(1)[0]


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """Generates Python modules from proto/ with grpc_tools.protoc and imports them."""
    from grpc_tools import protoc
    import grpc_tools

    out = tmp_path_factory.mktemp("stubs")
    # The health proto's file lives in "e2e_health/" so its Python module does not shadow the
    # grpcio package; the wire name comes from its proto package (grpc.health.v1).
    health_src = out / "src"
    (health_src / "e2e_health").mkdir(parents=True)
    (health_src / "e2e_health" / "health.proto").write_text(HEALTH_PROTO)
    include = Path(grpc_tools.__file__).parent / "_proto"
    for src, proto in [(ROOT / "proto", "hotline/v1/hotline.proto"),
                       (ROOT / "proto", "inference/grpc_predict_v2.proto"),
                       (health_src, "e2e_health/health.proto")]:
        rc = protoc.main(["protoc", f"-I{src}", f"-I{include}", f"--python_out={out}",
                          f"--grpc_python_out={out}", str(src / proto)])
        assert rc == 0, f"protoc failed on {proto}"
    sys.path.insert(0, str(out))
    from e2e_health import health_pb2, health_pb2_grpc
    from hotline.v1 import hotline_pb2, hotline_pb2_grpc
    from inference import grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc

    class Stubs:
        pb = hotline_pb2
        rpc = hotline_pb2_grpc
        kserve_pb = grpc_predict_v2_pb2
        kserve_rpc = grpc_predict_v2_pb2_grpc
        health_pb = health_pb2
        health_rpc = health_pb2_grpc

    return Stubs


def make_repo(root: Path):
    """Two copies of the fixture model: "tiny" (roomy queue) and "tiny_small_queue" (a queue of 2,
    one instance, for the flood test)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, extra in [
        ("tiny", "batching: {max_batch_size: 8, max_queue_delay_ms: 2, max_queue_size: 4096}\n"
                 "instances: 1\n"),
        ("tiny_small_queue", "batching: {max_batch_size: 2, max_queue_delay_ms: 0, "
                             "max_queue_size: 2}\ninstances: 1\n"),
    ]:
        dst = root / name
        shutil.copytree(FIXTURE_MODEL, dst)
        text = (dst / "model.yaml").read_text()
        lines = [l for l in text.splitlines() if not l.startswith("name:")]
        (dst / "model.yaml").write_text(f"name: {name}\n" + "\n".join(lines) + "\n" + extra)
    return root


class ServerProcess:
    """`hotline serve` on free ports with a generated config, started and waited for. Subclasses
    change what the config holds (config_body) and where the server runs (cwd)."""

    def __init__(self, workdir: Path, repo: Path, extra_config: str = "", name: str = "server",
                 cwd: Path = None):
        workdir.mkdir(parents=True, exist_ok=True)
        self.grpc_port, self.http_port = free_ports(2)
        self.config = workdir / f"{name}.yaml"
        self.config.write_text(
            f"host: 127.0.0.1\ngrpc_port: {self.grpc_port}\nhttp_port: {self.http_port}\n"
            + self.config_body(repo) + extra_config)
        self.log_path = workdir / f"{name}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([hotline_bin(), "serve", "--config", str(self.config)],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=str(cwd or workdir))
        self.wait_ready()

    def config_body(self, repo: Path) -> str:
        return (f"model_repository: {repo}\nstartup_models: [tiny, tiny_small_queue]\n"
                f"default_model: tiny\nadmin_token: {ADMIN_TOKEN}\nlog_requests: true\n")

    @property
    def target(self):
        return f"127.0.0.1:{self.grpc_port}"

    def raw_http(self, path, body=None, headers=None, method=None, timeout=30):
        """(status, body bytes) of an HTTP request; error statuses are returned, not raised."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.http_port}{path}", data=body,
                                     headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def http(self, path, body=None, headers=None, method=None):
        return self.raw_http(path, body, headers, method)

    def wait_ready(self, timeout=240):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hotline serve exited with {self.proc.returncode}:\n"
                                   + self.log_path.read_text()[-4000:])
            try:
                if self.raw_http("/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("hotline serve not ready in time:\n" + self.log_path.read_text()[-4000:])

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def metrics(self):
        status, body = self.raw_http("/metrics")
        assert status == 200
        return body.decode()


def metric_value(text, name, **labels):
    """The value of one sample in Prometheus text format, or None."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    prefix = f"{name}{{{want}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    return None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    srv = ServerProcess(work, make_repo(work / "models"))
    yield srv
    rc = srv.stop()
    assert rc == 0, f"hotline serve exited with {rc} on SIGTERM:\n" + srv.log_path.read_text()[-4000:]


@pytest.fixture(scope="session")
def reference():
    return json.loads(REFERENCE.read_text())
