"""End to end, the work-order webhook: new orders are POSTed to a stand-in for the city's system
(Python's http.server, written here) that fails the first attempts; the server retries until it
is answered 2xx, and an order filed while the system is down is delivered after the server is
killed with -9 and started again (the outbox is in the store, committed with the order)."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import free_ports, metric_value
from dialog_harness import DialogServer, HttpCall, load_scripts, model_repo


class CitySystem:
    """Answers 500 to the first `fail_first` POSTs of each order, then 200; records them all."""

    def __init__(self, port, fail_first=0):
        self.port, self.fail_first = port, fail_first
        self.posts = []  # (order id from the body, Idempotency-Key, status, body)
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    tried = sum(1 for p in outer.posts if p[0] == body["id"])
                    status = 500 if tried < outer.fail_first else 200
                    outer.posts.append((body["id"], self.headers.get("Idempotency-Key"), status,
                                        body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def delivered(self, order_id):
        with self.lock:
            return [p for p in self.posts if p[0] == order_id and p[2] == 200]

    def attempts(self, order_id):
        with self.lock:
            return [p for p in self.posts if p[0] == order_id]

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class WebhookServer(DialogServer):
    def __init__(self, workdir, repo, db, hook_port, name):
        self.hook_port = hook_port
        super().__init__(workdir, repo, db, name=name)

    def config_body(self, repo):
        return super().config_body(repo) + (
            f"  webhook: {{url: 'http://127.0.0.1:{self.hook_port}/orders', timeout_s: 2,"
            f" retry_min_s: 0.2, retry_max_s: 1, poll_s: 0.1}}\n")


def dispatch_script():
    for s in load_scripts():
        e = s["expect"]
        if (e["outcome"] == "dispatch" and e.get("work_order") and len(s["turns"]) >= 3
                and not any("{order:" in t for t in s["turns"])):
            return s
    raise AssertionError("no self-contained dispatch call of 3+ turns in tests/dialog/*.jsonl")


def file_order(server, call_id):
    script = dispatch_script()
    call = HttpCall(server, call_id, script.get("reference_time"))
    order = ""
    for text in script["turns"]:
        order = order or call.turn(text)["work_order_id"]
    call.end()
    assert order, "the scripted call filed no order"
    return order


def wait_for(pred, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return model_repo(tmp_path_factory.mktemp("hookrepo") / "models")


def test_orders_are_delivered_with_retries(tmp_path, repo):
    port = free_ports(1)[0]
    city = CitySystem(port, fail_first=2)
    srv = WebhookServer(tmp_path, repo, tmp_path / "orders.sqlite", port, "hook")
    try:
        order = file_order(srv, "hook-1")
        assert wait_for(lambda: city.delivered(order)), city.posts
        tries = city.attempts(order)
        assert [t[2] for t in tries] == [500, 500, 200]
        assert all(t[1] == order for t in tries)  # Idempotency-Key: the order id
        status, stored = srv.http(f"/v1/work-orders/{order}")
        sent = tries[-1][3]
        for key in ["id", "call_id", "intent", "department", "caller_text", "summary", "slots",
                    "created_at"]:
            assert sent[key] == stored[key], key
        m = srv.metrics()
        assert metric_value(m, "hotline_webhook_deliveries_total", result="error") == 2
        assert metric_value(m, "hotline_webhook_deliveries_total", result="ok") == 1
        assert wait_for(lambda: metric_value(srv.metrics(), "hotline_webhook_pending") == 0)
    finally:
        assert srv.stop() == 0
        city.stop()


def test_an_order_filed_while_the_system_is_down_survives_kill_9(tmp_path, repo):
    port = free_ports(1)[0]  # nothing listens yet: deliveries are refused
    db = tmp_path / "orders.sqlite"
    first = WebhookServer(tmp_path, repo, db, port, "down")
    order = file_order(first, "hook-2")
    time.sleep(1)  # a few refused attempts
    first.kill()
    city = CitySystem(port)
    second = WebhookServer(tmp_path, repo, db, port, "up")
    try:
        assert wait_for(lambda: city.delivered(order)), city.posts
        time.sleep(1)
        assert len(city.delivered(order)) == 1  # delivered, and not again
    finally:
        assert second.stop() == 0
        city.stop()
