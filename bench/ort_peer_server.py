#!/usr/bin/env python3
"""The server a user would build instead of `hotline serve` (issue 25, S1's peer): Python gRPC
(grpcio) serving hotline.v1.Hotline/Understand from proto/ around ONNX Runtime, with the same
model folder, so `hotline bench` (the S1 load generator) drives it exactly as it drives
`hotline serve`.

    python bench/ort_peer_server.py --model models/default --port 50061
        [--max-batch 32] [--max-delay-ms 1] [--int8] [--threads 2] [--workers 64]

What it does per request, as such a server would: HuggingFace `tokenizers` WordPiece with the
folder's vocab.txt (lowercase, CJK split), a dynamic batcher (one thread collects up to
--max-batch requests, waiting at most --max-delay-ms after the first, pads them to the longest),
one `InferenceSession.run`, then softmax + top-3 intents, BIO slot spans in code points and the
intent's department from the folder's taxonomy.yaml. --max-batch 1 runs each request alone.
--int8 serves ONNX Runtime's dynamic INT8 model (onnxruntime.quantization.quantize_dynamic,
QInt8 weights, written beside the work files) instead of the FP32 ONNX.
Prints "ready <port>" on stdout once serving; SIGTERM/SIGINT stop it.
"""
import argparse
import json
import os
import queue
import signal
import sys
import tempfile
import threading
from concurrent import futures

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load_stubs(work):
    from grpc_tools import protoc
    import grpc_tools
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(["protoc", f"-I{ROOT}/proto", f"-I{include}", f"--python_out={work}",
                      f"--grpc_python_out={work}", f"{ROOT}/proto/hotline/v1/hotline.proto"])
    if rc != 0:
        sys.exit("ort_peer_server: protoc failed on proto/hotline/v1/hotline.proto")
    sys.path.insert(0, work)
    from hotline.v1 import hotline_pb2, hotline_pb2_grpc
    return hotline_pb2, hotline_pb2_grpc


class Model:
    def __init__(self, folder, onnx, threads):
        import onnxruntime as ort
        import yaml
        from tokenizers import BertWordPieceTokenizer
        cfg = yaml.safe_load(open(os.path.join(folder, "model.yaml"), encoding="utf-8"))
        files = cfg.get("files", {})
        labels = json.load(open(os.path.join(folder, files.get("labels", "labels.json")),
                                encoding="utf-8"))
        self.intents, self.tags = labels["intents"], labels["slot_tags"]
        tax = yaml.safe_load(open(os.path.join(folder, files.get("taxonomy", "taxonomy.yaml")),
                                  encoding="utf-8"))
        self.dept = {i["id"]: i.get("dept", "") for i in tax.get("intents", [])}
        self.max_len = int(cfg.get("max_length", 128))
        tok = cfg.get("tokenizer", {})
        self.tok = BertWordPieceTokenizer(os.path.join(folder, tok.get("vocab", "vocab.txt")),
                                          lowercase=tok.get("lowercase", True),
                                          strip_accents=None, handle_chinese_chars=True)
        self.tok.enable_truncation(self.max_len)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.sess = ort.InferenceSession(onnx, so, providers=["CPUExecutionProvider"])
        self.outputs = [o.name for o in self.sess.get_outputs()]

    def run(self, texts):
        encs = self.tok.encode_batch(texts)
        n = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), n), np.int64)
        mask = np.zeros((len(encs), n), np.int64)
        for i, e in enumerate(encs):
            ids[i, :len(e.ids)] = e.ids
            mask[i, :len(e.ids)] = 1
        out = dict(zip(self.outputs, self.sess.run(None, {
            "input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})))
        return [self.decode(t, e, out["intent_logits"][i], out["slot_logits"][i])
                for i, (t, e) in enumerate(zip(texts, encs))]

    def decode(self, text, enc, intent_logits, slot_logits):
        z = intent_logits - intent_logits.max()
        p = np.exp(z)
        p /= p.sum()
        top = np.argsort(-p, kind="stable")[:3]
        tags = slot_logits[:len(enc.ids)].argmax(-1)
        slots, cur = [], None
        for t in range(1, len(enc.ids) - 1):  # between [CLS] and [SEP]
            tag = self.tags[tags[t]]
            s, e = enc.offsets[t]
            if tag.startswith("B-") or (tag.startswith("I-") and (cur is None or cur[0] != tag[2:])):
                cur = [tag[2:], s, e]
                slots.append(cur)
            elif tag.startswith("I-"):
                cur[2] = e
            else:
                cur = None
        intent = self.intents[top[0]]
        return {"intent": intent, "confidence": float(p[top[0]]),
                "top_k": [(self.intents[k], float(p[k])) for k in top],
                "slots": [(ty, s, e, text[s:e]) for ty, s, e in slots],
                "department": self.dept.get(intent, ""), "num_tokens": len(enc.ids)}


class Batcher:
    """One thread: collects up to max_batch requests (waiting at most max_delay after the first)
    and runs them as one padded batch."""

    def __init__(self, model, max_batch, max_delay_ms):
        self.model, self.max_batch, self.delay = model, max_batch, max_delay_ms / 1000.0
        self.q = queue.Queue()
        threading.Thread(target=self.loop, daemon=True).start()

    def submit(self, text):
        f = futures.Future()
        self.q.put((text, f))
        return f.result()

    def loop(self):
        import time
        while True:
            batch = [self.q.get()]
            deadline = time.monotonic() + self.delay
            while len(batch) < self.max_batch:
                left = deadline - time.monotonic()
                try:
                    batch.append(self.q.get(timeout=left) if left > 0 else self.q.get_nowait())
                except queue.Empty:
                    break
            try:
                results = self.model.run([t for t, _ in batch])
                for (_, f), r in zip(batch, results):
                    f.set_result(r)
            except Exception as e:  # answer every caller of the batch with the error
                for _, f in batch:
                    f.set_exception(e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default"))
    ap.add_argument("--port", type=int, default=50061)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--max-delay-ms", type=float, default=1.0)
    ap.add_argument("--int8", action="store_true")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--workers", type=int, default=64, help="gRPC handler threads")
    a = ap.parse_args()
    import yaml
    work = tempfile.mkdtemp(prefix="ort-peer-")
    cfg = yaml.safe_load(open(os.path.join(a.model, "model.yaml"), encoding="utf-8"))
    onnx = os.path.join(a.model, cfg.get("files", {}).get("onnx", "model.onnx"))
    if a.int8:
        # Before grpc is imported: onnxruntime.quantization imports torch, whose import can abort
        # the process when grpc's libraries are already loaded.
        import shutil
        from onnxruntime.quantization import QuantType, quantize_dynamic
        src = shutil.copy(onnx, os.path.join(work, "model.onnx"))  # its scratch files go there
        q = os.path.join(work, "model_int8_dynamic.onnx")
        quantize_dynamic(src, q, weight_type=QuantType.QInt8)
        onnx = q
    import grpc
    pb, rpc = load_stubs(work)
    model = Model(a.model, onnx, a.threads)
    batcher = Batcher(model, a.max_batch, a.max_delay_ms)
    model.run(["预热"] * a.max_batch)  # warm-up

    class Servicer(rpc.HotlineServicer):
        def Understand(self, request, context):
            if not request.text:
                return pb.UnderstandResponse(result=pb.Understanding(intent="out_of_scope"),
                                             request_id=request.request_id)
            try:
                r = batcher.submit(request.text)
            except Exception as e:
                context.abort(grpc.StatusCode.INTERNAL, str(e))
            u = pb.Understanding(
                intent=r["intent"], confidence=r["confidence"], department=r["department"],
                num_tokens=r["num_tokens"],
                top_k=[pb.IntentScore(intent=i, probability=p) for i, p in r["top_k"]],
                slots=[pb.Slot(type=t, start=s, end=e, value=v, valid=True)
                       for t, s, e, v in r["slots"]])
            return pb.UnderstandResponse(result=u, request_id=request.request_id)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=a.workers),
                         maximum_concurrent_rpcs=4096)
    rpc.add_HotlineServicer_to_server(Servicer(), server)
    if server.add_insecure_port(f"127.0.0.1:{a.port}") == 0:
        sys.exit(f"ort_peer_server: cannot listen on 127.0.0.1:{a.port}")
    server.start()
    print(f"ready {a.port}", flush=True)
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    stop.wait()
    server.stop(5).wait()


if __name__ == "__main__":
    main()
