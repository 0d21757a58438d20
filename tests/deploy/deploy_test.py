"""deploy/: the Kubernetes manifests against the Kubernetes 1.31 schemas (kubernetes-validate,
strict, offline), the Prometheus alert rules through their promtool unit tests, and the Grafana
dashboard: valid JSON with unique panel ids, every query valid PromQL (promtool), every metric it
or the rules name registered by the server's source."""
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
MANIFESTS = sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def validate(paths):
    return subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", "1.31.0",
                           *map(str, paths)], capture_output=True, text=True, timeout=300)


def test_manifests_validate_against_kubernetes_schemas():
    r = validate(MANIFESTS)
    assert r.returncode == 0, r.stdout + r.stderr
    kinds = {d["kind"] for p in MANIFESTS for d in yaml.safe_load_all(p.read_text()) if d}
    assert {"Deployment", "Service", "ConfigMap", "Secret", "HorizontalPodAutoscaler",
            "PodDisruptionBudget", "NetworkPolicy"} <= kinds, kinds


def test_the_validator_rejects_a_broken_manifest(tmp_path):
    bad = yaml.safe_load((K8S / "deployment.yaml").read_text())
    bad["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}  # misspelt
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    assert validate([tmp_path / "bad.yaml"]).returncode != 0


def test_kustomization_lists_every_manifest():
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(k["resources"]) == [p.name for p in MANIFESTS]


def test_deployment_agrees_with_its_server_config():
    dep = yaml.safe_load((K8S / "deployment.yaml").read_text())
    cm = yaml.safe_load((K8S / "configmap.yaml").read_text())
    server = yaml.safe_load(cm["data"]["server.yaml"])
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    # SIGTERM comes after preStop; the pod must outlive the server's own grace period.
    assert pod["terminationGracePeriodSeconds"] >= (server["shutdown_grace_s"]
                                                    + c["lifecycle"]["preStop"]["sleep"]["seconds"])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": server["grpc_port"], "http": server["http_port"]}
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"]:
        get = c[probe]["httpGet"]
        # Probes carry no key: only the health routes are open (src/frontends/security.h).
        assert get["path"] in ("/healthz", "/readyz"), probe
        assert get["scheme"] == ("HTTPS" if server["security"].get("tls") else "HTTP"), probe
    assert pod["securityContext"]["runAsNonRoot"] is True
    # A non-loopback host needs TLS and clients (or insecure: true); this config has both.
    assert server["security"]["tls"]["cert"] and server["security"]["clients"]
    assert "insecure" not in server["security"]
    mounted = {m["mountPath"] for m in c["volumeMounts"]}
    for path in [server["security"]["tls"]["cert"]] + [x["key_file"] for x in server["security"]["clients"]]:
        assert any(path.startswith(m + "/") for m in mounted), path
    # The PostgreSQL password is not in the config.
    assert "@" in server["dialog"]["work_order_db"] and ":" not in \
        server["dialog"]["work_order_db"].split("//")[1].split("@")[0]


def registered_metrics():
    """Metric family names the server registers (AddCounter/AddGauge/AddHistogram in src/)."""
    names = set()
    for f in (ROOT / "src").rglob("*.cc"):
        names |= set(re.findall(r'Add(?:Counter|Gauge|Histogram)\(\s*"(hotline_[a-z0-9_]+)"',
                                f.read_text(encoding="utf-8")))
    return names


def used_metrics(expr):
    out = set()
    for m in re.findall(r"\b(hotline_[a-z0-9_]+)", expr):
        out.add(re.sub(r"_(bucket|sum|count)$", "", m))
    return out


def test_alert_rules_pass_their_unit_tests():
    r = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"],
                       cwd=DEPLOY / "prometheus", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    names = {x["alert"] for g in rules["groups"] for x in g["rules"]}
    assert {"HotlineDown", "HotlineP99LatencyHigh", "HotlineErrorRatioHigh",
            "HotlineQueueSaturated", "HotlineWorkOrderStoreFailing",
            "HotlineModelLoadFailed", "HotlineHotspot"} <= names
    known = registered_metrics()
    for g in rules["groups"]:
        for x in g["rules"]:
            assert used_metrics(x["expr"]) <= known, (x["alert"], used_metrics(x["expr"]) - known)


def test_dashboard_loads_and_its_queries_are_valid(tmp_path):
    dash = json.loads((DEPLOY / "grafana" / "hotline.json").read_text(encoding="utf-8"))
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
    exprs = [(p["title"], t["expr"]) for p in panels if p["type"] != "row" for t in p["targets"]]
    titles = " ".join(p["title"] for p in panels).lower()
    for want in ["requests", "p50", "p99", "queue", "batch", "tokens", "errors by code",
                 "model state", "outcome", "work orders", "hand-offs", "emergency"]:
        assert want in titles, want
    known = registered_metrics()
    for title, e in exprs:
        assert used_metrics(e) <= known, (title, used_metrics(e) - known)
    # Each query as a recording rule: promtool parses the PromQL.
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{i}", "expr": e.replace("$__rate_interval", "5m")}
        for i, (_, e) in enumerate(exprs)]}]}
    (tmp_path / "q.yml").write_text(yaml.safe_dump(rules))
    r = subprocess.run(["promtool", "check", "rules", str(tmp_path / "q.yml")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def containerfile_stages():
    """[(base image, stage name, [(instruction, arguments)])] of deploy/Containerfile."""
    text = (DEPLOY / "Containerfile").read_text().replace("\\\n", " ")
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, args = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            parts = args.split()
            stages.append((parts[0], parts[2] if len(parts) > 2 else "", []))
        else:
            assert stages, f"{op} before FROM"
            stages[-1][2].append((op, args.strip()))
    return stages


def test_containerfile_lint():
    """podman and buildah are not on this machine: the file is linted instead (stages, user,
    healthcheck, sources), and its runtime packages are checked against the libraries the built
    binary loads."""
    stages = containerfile_stages()
    assert [s[0] for s in stages] == ["debian:12", "debian:12-slim"]
    names = {s[1] for s in stages}
    runtime = stages[-1][2]
    ops = [op for op, _ in runtime]
    user = [a for op, a in runtime if op == "USER"]
    assert user and user[-1].split(":")[0] not in ("0", "root"), user
    assert ops.index("USER") < ops.index("ENTRYPOINT")
    assert "HEALTHCHECK" in ops and "/healthz" in dict(runtime)["HEALTHCHECK"]
    for _, _, instrs in stages:
        for op, args in instrs:
            if op != "COPY":
                continue
            words = args.split()
            if words[0].startswith("--from="):
                assert words[0].split("=", 1)[1] in names, args
            else:
                for src in words[:-1]:
                    assert src == "." or (ROOT / src).exists(), src


def runtime_packages():
    run = " ".join(a for op, a in containerfile_stages()[-1][2] if op == "RUN")
    m = re.search(r"--no-install-recommends\s+(.*?)\s*&&", run)
    return set(m.group(1).split())


def test_runtime_image_packages_cover_the_binarys_libraries():
    import os
    binary = os.environ.get("HOTLINE_BIN")
    assert binary and Path(binary).exists(), "HOTLINE_BIN must name the built hotline"
    libs = [l.split("=>")[1].split()[0] for l in subprocess.run(
        ["ldd", binary], capture_output=True, text=True, check=True).stdout.splitlines()
        if "=>" in l and "/" in l.split("=>")[1]]
    # One dpkg -S for all: "package:arch: /path" per line.
    paths = sorted({str(Path(lib).resolve()) for lib in libs} | set(libs))
    owners = subprocess.run(["dpkg", "-S", *paths], capture_output=True, text=True).stdout
    owned = {}
    for line in owners.splitlines():
        pkg, _, path = line.partition(": ")
        owned[path.strip()] = pkg.split(":")[0]
    needed = set()
    for lib in libs:
        pkg = owned.get(str(Path(lib).resolve())) or owned.get(lib)
        # A build with CUDA links NVIDIA's libraries from the CUDA toolkit (no Debian package);
        # the image builds with HOTLINE_CUDA=OFF, so its binary has no such library.
        if not pkg and "/cuda" in str(Path(lib).resolve()):
            continue
        assert pkg, f"{lib} belongs to no Debian package"
        needed.add(pkg)
    listed = runtime_packages()
    closure = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
         "--no-breaks", "--no-replaces", "--no-enhances", *sorted(listed)],
        capture_output=True, text=True, check=True).stdout
    provided = listed | {l.strip().split(":")[-1].strip() for l in closure.splitlines()}
    provided = {p.split(":")[0] for p in provided}
    base = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}  # in debian:12-slim
    assert needed - provided - base == set(), sorted(needed - provided - base)
