"""Issue 23's slow-client figure: `hotline serve` with 16 clients that send one byte of a request
head every 2 s, and /healthz timed every 100 ms meanwhile (target: every answer within 100 ms).

  python bench/slow_clients.py --hotline build/hotline [--model models/default] [--seconds 12]

Prints one JSON object: the /healthz latencies (p50, p99, max ms), failures, and what the slow
clients got back (the server cuts a head that is not whole within http_header_timeout_ms)."""
import argparse
import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hotline", required=True)
    ap.add_argument("--model", default="models/default")
    ap.add_argument("--seconds", type=float, default=12)
    ap.add_argument("--clients", type=int, default=16)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    shutil.copytree(a.model, work / "repo" / "model")
    grpc_port, http_port = free_port(), free_port()
    (work / "server.yaml").write_text(
        f"host: 127.0.0.1\ngrpc_port: {grpc_port}\nhttp_port: {http_port}\n"
        f"model_repository: {work / 'repo'}\nstartup_models: ['*']\nlog_requests: false\n")
    log = open(work / "server.log", "w")
    proc = subprocess.Popen([a.hotline, "serve", "--config", str(work / "server.yaml")],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{http_port}"
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(url + "/readyz", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        stop = threading.Event()
        got = []

        def slow():
            s = socket.create_connection(("127.0.0.1", http_port))
            s.settimeout(0.05)
            reply = b""
            for b in head:
                try:
                    s.sendall(bytes([b]))
                except OSError:
                    break
                if stop.wait(2.0):
                    break
                try:
                    reply += s.recv(4096)
                    if reply:
                        break
                except socket.timeout:
                    pass
                except OSError:
                    break
            got.append(reply.split(b"\r\n", 1)[0].decode(errors="replace") or "(nothing)")
            s.close()

        threads = [threading.Thread(target=slow) for _ in range(a.clients)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        lat, failures = [], 0
        end = time.time() + a.seconds
        while time.time() < end:
            t0 = time.perf_counter()
            try:
                ok = urllib.request.urlopen(url + "/healthz", timeout=10).status == 200
            except OSError:
                ok = False
            lat.append((time.perf_counter() - t0) * 1000)
            failures += not ok
            time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join()
        lat.sort()
        print(json.dumps({
            "slow_clients": a.clients, "healthz_calls": len(lat), "failures": failures,
            "healthz_ms": {"p50": round(lat[len(lat) // 2], 2),
                           "p99": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
                           "max": round(lat[-1], 2)},
            "slow_clients_got": sorted(set(got))}))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
