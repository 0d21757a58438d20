"""The OpenAPI document (api/openapi.yaml) against the real server: the document is valid OpenAPI
3 (openapi-spec-validator), it names every route the server installs and no other, and every
answer the server gives to the requests below (successes and errors, with and without a key) has
a status the document lists for that operation and a body its schema accepts
(openapi-schema-validator's OAS 3.0 validator)."""
import hashlib
import json
import re

import pytest
import yaml
from openapi_schema_validator import OAS30Validator
from openapi_spec_validator import validate_spec

from conftest import ROOT
from dialog_harness import DialogServer, load_scripts, model_repo

DOC = yaml.safe_load((ROOT / "api" / "openapi.yaml").read_text(encoding="utf-8"))
KEY = "openapi-key-0123456789abcdef0123"
WEAK = "openapi-weak-0123456789abcdef012"  # understand only


def test_the_document_is_valid_openapi_3():
    validate_spec(DOC)
    assert DOC["openapi"].startswith("3.")


def test_the_document_names_every_route_the_server_installs():
    src = "".join((ROOT / "src" / "frontends" / f).read_text(encoding="utf-8")
                  for f in ["http_frontend.cc", "console.cc"])
    routes = set()
    for method, raw, plain in re.findall(
            r'server\.(Get|Post|Patch|Put|Delete)\(\s*(?:R"\((.*?)\)"|"([^"]*)")', src):
        path = (raw or plain).replace("([^/]+)", "{}").replace("([^/]*)", "{}")
        routes.add((method.lower(), path))
    documented = set()
    for path, ops in DOC["paths"].items():
        for method in ops:
            if method in ("get", "post", "patch", "put", "delete"):
                documented.add((method, re.sub(r"\{[^}]+\}", "{}", path)))
    assert routes == documented, (sorted(routes - documented), sorted(documented - routes))


class Checked(DialogServer):
    """A dialog server with a key; every answer is checked against the document."""

    def __init__(self, workdir, repo):
        self.seen = set()
        super().__init__(workdir, repo, workdir / "orders.sqlite", name="openapi")

    def config_body(self, repo):
        return super().config_body(repo) + (
            "security:\n  clients:\n"
            f"  - {{name: all, key_sha256: {hashlib.sha256(KEY.encode()).hexdigest()}, "
            "roles: [admin]}\n"
            f"  - {{name: weak, key_sha256: {hashlib.sha256(WEAK.encode()).hexdigest()}, "
            "roles: [understand]}\n"
            "console: {}\n")

    def call(self, method, path, body=None, key=KEY, template=None):
        headers = {"X-API-Key": key} if key else {}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        status, raw = self.raw_http(path, data, headers, method.upper(), timeout=60)
        op = DOC["paths"][template or path.split("?")[0]][method]
        self.seen.add((method, template or path.split("?")[0]))
        assert str(status) in op["responses"], f"{method} {path}: {status} not documented"
        resp = op["responses"][str(status)]
        if "$ref" in resp:
            resp = DOC["components"]["responses"][resp["$ref"].rsplit("/", 1)[1]]
        (ctype, media), = resp["content"].items()
        if ctype == "application/json":
            doc = json.loads(raw)
            schema = dict(media["schema"], components=DOC["components"])
            errors = list(OAS30Validator(schema).iter_errors(doc))
            assert not errors, f"{method} {path} ({status}): {errors[0].message}"
            return status, doc
        return status, raw.decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("openapi")
    srv = Checked(work, model_repo(work / "models"))
    yield srv
    assert srv.stop() == 0


def test_every_answer_matches_the_document(server):
    s = server
    assert s.call("post", "/v1/understand", {"text": "我家停水了"})[0] == 200
    assert s.call("post", "/v1/understand", {"texts": ["我家停水了", "路灯坏了"]})[0] == 200
    assert s.call("post", "/v1/understand", {"text": 1})[0] == 400
    assert s.call("post", "/v1/understand", {"text": "x"}, key=None)[0] == 401
    assert s.call("get", "/v1/models")[0] == 200
    assert s.call("get", "/v1/models", key="wrong-key-0123456789")[0] == 401
    script = next(x for x in load_scripts() if x["expect"]["outcome"] == "dispatch"
                  and x["expect"].get("work_order")
                  and not any("{order:" in t for t in x["turns"]))
    order = ""
    for text in script["turns"]:
        body = {"call_id": "openapi-1", "text": text}
        if script.get("reference_time"):
            body["reference_time"] = script["reference_time"]
        status, r = s.call("post", "/v1/converse", body)
        assert status == 200
        order = order or r["work_order_id"]
    assert order, "the scripted call filed no order"
    assert s.call("post", "/v1/converse", {"call_id": "bad id!", "text": "x"})[0] == 400
    tmpl = "/v1/calls/{call_id}/end"
    assert s.call("post", "/v1/calls/openapi-1/end", b"", template=tmpl)[0] == 200
    assert s.call("post", "/v1/calls/openapi-1/end", b"{}", template=tmpl)[0] == 404
    tmpl = "/v1/work-orders/{id}"
    status, got = s.call("get", f"/v1/work-orders/{order}", template=tmpl)
    assert status == 200 and got["id"] == order
    assert s.call("get", "/v1/work-orders/WO20991231-000001", template=tmpl)[0] == 404
    assert s.call("get", f"/v1/work-orders/{order}", key=WEAK, template=tmpl)[0] == 403
    status, got = s.call("patch", f"/v1/work-orders/{order}",
                         {"status": "in_progress", "note": "已派单"}, template=tmpl)
    assert status == 200 and got["notes"][0]["text"] == "已派单"
    assert s.call("patch", f"/v1/work-orders/{order}", {"status": "nope"}, template=tmpl)[0] == 400
    assert s.call("patch", "/v1/work-orders/WO20991231-000001", {"note": "x"},
                  template=tmpl)[0] == 404
    status, got = s.call("get", "/v1/work-orders?status=in_progress&limit=5")
    assert status == 200 and [o["id"] for o in got["orders"]] == [order]
    assert s.call("get", "/v1/work-orders?limit=0")[0] == 400
    assert s.call("get", "/v1/work-orders?colour=red")[0] == 400
    status, text = s.call("get", "/metrics")
    assert status == 200 and "hotline_dialog_work_orders_total" in text
    assert s.call("get", "/metrics", key=WEAK)[0] == 403
    for probe in ["/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"]:
        assert s.call("get", probe, key=None)[0] == 200
    # The operators' console (console: in the config): its files and its API.
    tmpl = "/console/{file}"
    assert s.call("get", "/console/", template=tmpl)[0] == 200
    assert s.call("get", "/console/app.js", template=tmpl)[0] == 200
    assert s.call("get", "/console/nothing.js", template=tmpl)[0] == 404
    for path in ["session", "hotspots", "health", "trends?bucket=day", "orders?sla=overdue",
                 "orders?status=in_progress"]:
        assert s.call("get", f"/v1/console/{path}")[0] == 200
    assert s.call("get", "/v1/console/trends?bucket=week")[0] == 400
    assert s.call("get", "/v1/console/events", key=WEAK)[0] == 403
    tmpl = "/v1/console/orders/{id}"
    assert s.call("get", f"/v1/console/orders/{order}", template=tmpl)[0] == 200
    assert s.call("get", "/v1/console/orders/WO20991231-000001", template=tmpl)[0] == 404
    assert s.call("post", "/v1/console/merge", {"into": order, "from": order})[0] == 400
    documented = {(m, p) for p, ops in DOC["paths"].items() for m in ops
                  if m in ("get", "post", "patch")}
    assert s.seen == documented, sorted(documented - s.seen)
