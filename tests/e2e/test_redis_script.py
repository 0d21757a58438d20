"""scripts/redis.sh (issue 23): after the server is killed with -9, `start` starts a new one
instead of saying "already running" (the killed server, unreaped, still passed kill -0)."""
import os
import signal
import subprocess
import time

from conftest import ROOT, free_port

SCRIPT = str(ROOT / "scripts" / "redis.sh")


def redis(*args):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=60)


def ping(port):
    return subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True,
                          timeout=10).stdout.strip()


def test_start_after_kill_9_starts_a_new_server(tmp_path):
    port = free_port()
    folder = str(tmp_path / "redis")
    first = redis("start", str(port), folder)
    assert first.returncode == 0 and "redis-server on" in first.stdout, first.stdout + first.stderr
    pid = int((tmp_path / "redis" / "redis.pid").read_text())
    try:
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 10
        while time.time() < deadline and ping(port) == "PONG":
            time.sleep(0.05)
        assert ping(port) != "PONG"
        again = redis("start", str(port), folder)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "already running" not in again.stdout and "redis-server on" in again.stdout, \
            again.stdout
        assert ping(port) == "PONG"
        new_pid = int((tmp_path / "redis" / "redis.pid").read_text())
        assert new_pid != pid
        # A live server is still recognised.
        assert "already running" in redis("start", str(port), folder).stdout
    finally:
        stop = redis("stop", str(port), folder)
        assert stop.returncode == 0, stop.stderr
    assert ping(port) != "PONG"
