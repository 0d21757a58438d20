"""W3C Trace Context: a valid `traceparent` (HTTP header or gRPC metadata) is accepted and its
trace-id lands in the request's log line; malformed ones (W3C's own invalid examples: upper-case
hex, an all-zero trace-id, version ff, a short header) are ignored and the call still answers."""
import json
import time

import grpc
import pytest

from conftest import ServerProcess, make_repo

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
VALID = f"00-{TRACE}-00f067aa0ba902b7-01"
INVALID = ["00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
           f"ff-{TRACE}-00f067aa0ba902b7-01",
           f"00-{TRACE}-00f067aa0ba902b7"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("trace")
    srv = ServerProcess(work, make_repo(work / "models"))
    yield srv
    assert srv.stop() == 0


def understand_lines(server, request_id):
    """The server's "understand" log lines for one request id."""
    deadline = time.time() + 10
    while time.time() < deadline:
        lines = [json.loads(l) for l in server.log_path.read_text().splitlines()
                 if l.startswith("{")]
        mine = [l for l in lines if l.get("event") == "understand"
                and l.get("request_id") == request_id]
        if mine:
            return mine
        time.sleep(0.1)
    raise AssertionError(f"no understand line for {request_id}")


def test_traceparent_over_http_and_grpc_is_logged(stubs, server):
    body = json.dumps({"text": "路灯坏了", "request_id": "trace-http"}).encode()
    status, _ = server.raw_http("/v1/understand", body, {"traceparent": VALID,
                                                         "Content-Type": "application/json"})
    assert status == 200
    assert understand_lines(server, "trace-http")[0]["trace_id"] == TRACE
    with grpc.insecure_channel(server.target) as ch:
        stub = stubs.rpc.HotlineStub(ch)
        stub.Understand(stubs.pb.UnderstandRequest(text="路灯坏了", request_id="trace-grpc"),
                        timeout=30, metadata=(("traceparent", VALID),))
    assert understand_lines(server, "trace-grpc")[0]["trace_id"] == TRACE


def test_malformed_traceparent_is_ignored(server):
    for i, bad in enumerate(INVALID):
        rid = f"trace-bad-{i}"
        body = json.dumps({"text": "路灯坏了", "request_id": rid}).encode()
        status, _ = server.raw_http("/v1/understand", body, {"traceparent": bad,
                                                             "Content-Type": "application/json"})
        assert status == 200, bad
        assert "trace_id" not in understand_lines(server, rid)[0], bad
