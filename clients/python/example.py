"""A call through the Python client, then its work order:
    python clients/python/example.py --target 127.0.0.1:50051 [--key KEY] [--ca ca.pem]
(`make run` serves on 127.0.0.1:50051 without keys.)"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hotline_client import Client  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--target", default="127.0.0.1:50051")
p.add_argument("--key")
p.add_argument("--ca")
a = p.parse_args()
with Client(a.target, key=a.key, ca=a.ca) as c:
    for text in ["我家停水了", "天河区荷光路南一巷12号", "对"]:
        r = c.converse("example-call", text)
        print(f"caller: {text}\nhotline: {r['reply']}")
    summary = c.end_call("example-call")
    print("outcome:", summary["outcome"], "order:", summary["work_order_id"] or "-")
    if summary["work_order_id"]:
        print(c.work_order(summary["work_order_id"])["summary"])
