"""What the CLI tests share: the hotline binary under test, the repository paths, running it,
and cutting a JSON Lines file to its first lines."""
import os
import subprocess

HOTLINE = os.environ.get("HOTLINE_BIN", "hotline")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TINY = os.path.join(ROOT, "tests", "fixtures", "nlu", "tiny_model")


def run(args, timeout=500):
    return subprocess.run([HOTLINE, *args], capture_output=True, timeout=timeout)


def head(src, dst, n):
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as g:
        for k, line in enumerate(f):
            if k >= n:
                break
            g.write(line)
    return dst
