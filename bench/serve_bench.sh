#!/usr/bin/env bash
# PERFORMANCE.md S1 and batching's gain, measured with `hotline bench` against `hotline serve`.
#   bash bench/serve_bench.sh [build/hotline]
# S1: the default model, 64 concurrent gRPC callers (closed loop), utterances of 5–60 characters
# from data/hotline/test.jsonl; target >= 1,000 requests/s with P99 <= 50 ms.
# Batching's gain: the same server with max_batch_size 1, and for both the best requests/s whose
# P99 stays within 50 ms over concurrency 8, 16, 32, 64.
# Env: MODEL (default models/default), DURATION seconds per run (default 15), CONCURRENCIES,
#      PRECISION (the server's plan precision; default: the server's own default, fp32),
#      BATCHES (max_batch_size values to run, default "32 1").
# Prints one JSON line per run and a summary; appends nothing by itself (copy into RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
HOTLINE="$(realpath "${1:-build/hotline}")"
MODEL="${MODEL:-models/default}"
DURATION="${DURATION:-15}"
CONCURRENCIES="${CONCURRENCIES:-8 16 32 64}"
BATCHES="${BATCHES:-32 1}"
PRECISION="${PRECISION:-}"
PY="${HOTLINE_PYTHON:-python3}"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$PY" - "$work/texts.txt" <<'PYEOF'
import json, sys
out = open(sys.argv[1], "w", encoding="utf-8")
n = 0
for line in open("data/hotline/test.jsonl", encoding="utf-8"):
    t = json.loads(line)["text"]
    if 5 <= len(t) <= 60:
        out.write(t.replace("\n", " ") + "\n")
        n += 1
print(f"serve_bench: {n} texts of 5-60 characters", file=sys.stderr)
PYEOF

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_server() {  # $1: max_batch_size
  local repo="$work/repo-$1"
  mkdir -p "$repo"
  cp -r "$MODEL" "$repo/model"
  "$PY" - "$repo/model/model.yaml" "$1" <<'PYEOF'
import sys, yaml
path, batch = sys.argv[1], int(sys.argv[2])
y = yaml.safe_load(open(path, encoding="utf-8"))
y["batching"] = {"max_batch_size": batch, "max_queue_delay_ms": 1 if batch > 1 else 0,
                 "max_queue_size": 4096}
y.setdefault("instances", 1)
yaml.safe_dump(y, open(path, "w", encoding="utf-8"), allow_unicode=True)
PYEOF
  GRPC_PORT="$(free_port)"; HTTP_PORT="$(free_port)"
  cat > "$work/server-$1.yaml" <<YAML
host: 127.0.0.1
grpc_port: $GRPC_PORT
http_port: $HTTP_PORT
model_repository: $repo
startup_models: ["*"]
log_requests: false
YAML
  if [ -n "$PRECISION" ]; then echo "precision: $PRECISION" >> "$work/server-$1.yaml"; fi
  "$HOTLINE" serve --config "$work/server-$1.yaml" > "$work/server-$1.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$HTTP_PORT/readyz" >/dev/null; then return 0; fi
    if ! kill -0 "$server_pid" 2>/dev/null; then cat "$work/server-$1.log" >&2; exit 1; fi
    sleep 0.5
  done
  echo "serve_bench: server not ready" >&2; exit 1
}

stop_server() {
  kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
}

for batch in $BATCHES; do
  start_server "$batch"
  for c in $CONCURRENCIES; do
    r="$("$HOTLINE" bench --target "127.0.0.1:$GRPC_PORT" --concurrency "$c" \
         --duration "$DURATION" --texts "$work/texts.txt" --json)"
    m="$(curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | awk '
      /^hotline_inference_count_total/ {i+=$2} /^hotline_execution_count_total/ {e+=$2}
      END {if (e > 0) printf "%.2f", i/e; else print 0}')"
    echo "{\"max_batch_size\": $batch, \"concurrency\": $c, \"mean_batch_so_far\": $m, \"bench\": $r}" \
      | tee -a "$work/runs.jsonl"
  done
  stop_server
done

"$PY" - "$work/runs.jsonl" <<'PYEOF'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("\n| max batch | callers | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | errors |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in runs:
    b = r["bench"]; l = b["latency_ms"]
    print(f"| {r['max_batch_size']} | {r['concurrency']} | {b['rps']:.0f} | {l['p50']:.1f} | "
          f"{l['p90']:.1f} | {l['p99']:.1f} | {l['p999']:.1f} | {b['errors']} |")
def best(batch):
    ok = [r["bench"]["rps"] for r in runs if r["max_batch_size"] == batch
          and r["bench"]["latency_ms"]["p99"] <= 50 and r["bench"]["errors"] == 0]
    return max(ok) if ok else 0.0
s1 = [r for r in runs if r["max_batch_size"] == 32 and r["concurrency"] == 64]
if s1:
    b = s1[0]["bench"]
    print(f"\nS1 (64 callers, batching on): {b['rps']:.0f} req/s, p99 {b['latency_ms']['p99']:.1f} ms"
          f" -> {'MET' if b['rps'] >= 1000 and b['latency_ms']['p99'] <= 50 else 'NOT MET'}")
# Batching's gain: the largest max_batch_size run against max batch 1, where BATCHES ran both.
batches = sorted({r["max_batch_size"] for r in runs})
for b in batches:
    print(f"best req/s with p99 <= 50 ms at max batch {b}: {best(b):.0f}")
if 1 in batches and batches[-1] > 1 and best(1):
    print(f"batching's gain (max batch {batches[-1]} / 1): {best(batches[-1]) / best(1):.2f}x")
PYEOF
