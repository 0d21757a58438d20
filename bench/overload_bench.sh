#!/usr/bin/env bash
# Issue 23's overload figure, measured with `hotline bench` against `hotline serve`:
#   bash bench/overload_bench.sh [build/hotline]
# 1. capacity: closed loop, CONCURRENCY gRPC callers without deadlines (requests/s answered);
# 2. overload: open loop (Poisson arrivals) at FACTOR x capacity, each call with a 500 ms
#    deadline (TIMEOUT_MS). Target: OK answers (all within their deadline) >= 90% of capacity,
#    and the P99 time to a refusal <= 10 ms.
# Texts: the 5-60 character utterances of data/hotline/test.jsonl. The server runs the model
# folder's own batching settings (max_queue_wait_ms default 1000) and config/server.yaml's
# precision (auto).
# Env: MODEL (models/default), DURATION seconds per run (20), CONCURRENCY (64), FACTOR (2),
#      TIMEOUT_MS (500).
# Prints one JSON line per run and a summary (copy into bench/RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
HOTLINE="$(realpath "${1:-build/hotline}")"
MODEL="${MODEL:-models/default}"
DURATION="${DURATION:-20}"
CONCURRENCY="${CONCURRENCY:-64}"
FACTOR="${FACTOR:-2}"
TIMEOUT_MS="${TIMEOUT_MS:-500}"
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
for line in open("data/hotline/test.jsonl", encoding="utf-8"):
    t = json.loads(line)["text"]
    if 5 <= len(t) <= 60:
        out.write(t.replace("\n", " ") + "\n")
PYEOF

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mkdir -p "$work/repo"
cp -r "$MODEL" "$work/repo/model"
GRPC_PORT="$(free_port)"; HTTP_PORT="$(free_port)"
cat > "$work/server.yaml" <<YAML
host: 127.0.0.1
grpc_port: $GRPC_PORT
http_port: $HTTP_PORT
model_repository: $work/repo
startup_models: ["*"]
precision: auto
log_requests: true
YAML
"$HOTLINE" serve --config "$work/server.yaml" > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:$HTTP_PORT/readyz" >/dev/null; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then cat "$work/server.log" >&2; exit 1; fi
  sleep 0.5
done

cap="$("$HOTLINE" bench --target "127.0.0.1:$GRPC_PORT" --concurrency "$CONCURRENCY" \
       --duration "$DURATION" --texts "$work/texts.txt" --json)"
echo "{\"run\": \"capacity\", \"bench\": $cap}"
rate="$("$PY" -c "import json,sys; print(round(json.loads(sys.argv[1])['rps'] * $FACTOR))" "$cap")"
over="$("$HOTLINE" bench --target "127.0.0.1:$GRPC_PORT" --rate "$rate" --timeout-ms "$TIMEOUT_MS" \
        --duration "$DURATION" --texts "$work/texts.txt" --json)"
echo "{\"run\": \"overload\", \"bench\": $over}"
# The server's own count per code (both runs): which refusals it made, which deadlines it saw pass.
curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | awk '/^hotline_requests_total/ {
  match($0, /code="[A-Z_]+"/); c[substr($0, RSTART + 6, RLENGTH - 7)] += $NF }
  END { for (k in c) printf "server %s %d\n", k, c[k] }'
shed_lines="$(grep -c '"event":"shed"' "$work/server.log" || true)"
log_bytes="$(wc -c < "$work/server.log")"

"$PY" - "$cap" "$over" "$FACTOR" "$TIMEOUT_MS" "$shed_lines" "$log_bytes" <<'PYEOF'
import json, sys
cap, over = json.loads(sys.argv[1]), json.loads(sys.argv[2])
factor, timeout_ms, shed_lines, log_bytes = sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
served = over["rps"] / cap["rps"] if cap["rps"] else 0
refusals = over["errors"]
offered = over["rate"]
print(f"\ncapacity: {cap['rps']:.0f} req/s (closed loop, {cap['concurrency']} callers, "
      f"p99 {cap['latency_ms']['p99']:.1f} ms)")
print(f"overload: {offered:.0f} req/s offered ({factor}x), {timeout_ms} ms deadlines: "
      f"{over['rps']:.0f} req/s OK in time = {100 * served:.1f}% of capacity "
      f"(p50 {over['latency_ms']['p50']:.1f}, p99 {over['latency_ms']['p99']:.1f} ms); "
      f"{refusals} refused {over['errors_by_code']} (p99 ms by code "
      f"{over['refusal_latency_ms']['p99_by_code']}), refusal p50 "
      f"{over['refusal_latency_ms']['p50']:.2f} ms, p99 {over['refusal_latency_ms']['p99']:.2f} "
      f"ms, max {over['refusal_latency_ms']['max']:.1f} ms")
print(f"server log: {log_bytes} bytes, {shed_lines} 'shed' lines")
ok = served >= 0.9 and over["refusal_latency_ms"]["p99"] <= 10
print("target (>= 90% of capacity in time, refusal p99 <= 10 ms):", "MET" if ok else "NOT MET")
PYEOF
