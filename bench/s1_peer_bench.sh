#!/usr/bin/env bash
# S1 side by side (issue 25): `hotline serve` and the server a user would build instead
# (bench/ort_peer_server.py: Python gRPC around ONNX Runtime), same model folder, same proto, same
# load generator (`hotline bench`, closed loop) and the same texts as bench/serve_bench.sh (the
# 5-60 character utterances of data/hotline/test.jsonl), one server at a time on this machine.
#   bash bench/s1_peer_bench.sh [build/hotline]
# Env: MODEL (default models/default; give it int8_calibration.json for auto to pick int8),
#      DURATION seconds per run (default 15), CONCURRENCIES (default "64"),
#      SERVERS (default "hotline:auto ort:fp32 ort:int8"; hotline:<precision> names the
#      server's precision, ort:int8 serves ONNX Runtime's dynamic INT8 model),
#      MAX_BATCH (both servers' max batch, default 32), DELAY_MS (their queue delay, default 1).
# `hotline serve` runs the shipped config/server.yaml (log_requests included) minus its dialog
# section, on a repository holding MODEL with the batching below.
# Besides requests/s and latency, each run records the server's CPU time (/proc/PID/stat, all
# threads) per request answered: on a machine whose cores other work shares, that cost, and the
# requests/s two cores would give at it, are what compare servers fairly.
# Prints one JSON line per run and a Markdown table (copy into bench/RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
HOTLINE="$(realpath "${1:-build/hotline}")"
MODEL="${MODEL:-models/default}"
DURATION="${DURATION:-15}"
CONCURRENCIES="${CONCURRENCIES:-64}"
SERVERS="${SERVERS:-hotline:auto ort:fp32 ort:int8}"
MAX_BATCH="${MAX_BATCH:-32}"
DELAY_MS="${DELAY_MS:-1}"
PY="${HOTLINE_PYTHON:-$HOME/.cache/hotline/venv/bin/python}"
work="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" || true; fi
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

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime + stime, clock ticks (100/s)

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_grpc() {  # $1 port, $2 log: ready once a real Understand call is answered
  for _ in $(seq 1 900); do
    if ! kill -0 "$pid" 2>/dev/null; then cat "$2" >&2; exit 1; fi
    if "$HOTLINE" bench --target "127.0.0.1:$1" --concurrency 1 --duration 0.2 --warmup 0 \
         --texts "$work/texts.txt" --json 2>/dev/null | grep -q '"errors": *0[,}]'; then
      return 0
    fi
    sleep 1
  done
  echo "s1_peer_bench: server not ready" >&2; exit 1
}

start_hotline() {  # $1 precision
  local repo="$work/repo"
  rm -rf "$repo"; mkdir -p "$repo"
  cp -r "$MODEL" "$repo/model"
  "$PY" - "$repo/model/model.yaml" <<PYEOF
import sys, yaml
y = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))
y["name"] = "default"
y["batching"] = {"max_batch_size": $MAX_BATCH, "max_queue_delay_ms": $DELAY_MS,
                 "max_queue_size": 4096}
y.setdefault("instances", 1)
yaml.safe_dump(y, open(sys.argv[1], "w", encoding="utf-8"), allow_unicode=True)
PYEOF
  PORT="$(free_port)"
  # The shipped config/server.yaml (log_requests and all), on free ports and this repository,
  # without its dialog and console sections (S1 measures Understand).
  "$PY" - "$work/server.yaml" "$PORT" "$(free_port)" "$repo" "$1" <<'PYEOF'
import sys, yaml
out, grpc_port, http_port, repo, precision = sys.argv[1:]
c = yaml.safe_load(open("config/server.yaml", encoding="utf-8"))
c.pop("dialog", None)
c.pop("console", None)  # the console shows dialog calls: it goes with the dialog section
c.update({"host": "127.0.0.1", "grpc_port": int(grpc_port), "http_port": int(http_port),
          "model_repository": repo, "startup_models": ["*"], "default_model": "default",
          "precision": precision})
yaml.safe_dump(c, open(out, "w", encoding="utf-8"), allow_unicode=True)
PYEOF
  "$HOTLINE" serve --config "$work/server.yaml" > "$work/server.log" 2>&1 &
  pid=$!
  wait_grpc "$PORT" "$work/server.log"
  grep -o '"precision_chosen".*' "$work/server.log" >&2 || true
}

start_ort() {  # $1 fp32|int8
  PORT="$(free_port)"
  local flag=""; [ "$1" = int8 ] && flag="--int8"
  "$PY" bench/ort_peer_server.py --model "$MODEL" --port "$PORT" --max-batch "$MAX_BATCH" \
    --max-delay-ms "$DELAY_MS" $flag > "$work/server.log" 2>&1 &
  pid=$!
  wait_grpc "$PORT" "$work/server.log"
}

for s in $SERVERS; do
  kind="${s%%:*}"; prec="${s#*:}"
  if [ "$kind" = hotline ]; then start_hotline "$prec"; else start_ort "$prec"; fi
  for c in $CONCURRENCIES; do
    # The server's CPU time over the run (all its threads), read before and after, so that the
    # CPU cost per request stands even when other work shares the cores.
    t0="$(cpu_ticks "$pid")"
    r="$("$HOTLINE" bench --target "127.0.0.1:$PORT" --concurrency "$c" --duration "$DURATION" \
         --warmup 0 --texts "$work/texts.txt" --json)"
    t1="$(cpu_ticks "$pid")"
    echo "{\"server\": \"$s\", \"concurrency\": $c, \"cpu_s\": $(( t1 - t0 ))e-2, \"load\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"bench\": $r}" \
      | tee -a "$work/runs.jsonl"
  done
  kill -TERM "$pid"; wait "$pid" || true; pid=""
done

"$PY" - "$work/runs.jsonl" <<'PYEOF'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("\n| server | callers | req/s | p50 ms | p90 ms | p99 ms | errors | server CPU ms/request "
      "| 2 cores / that | load avg |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for r in runs:
    b = r["bench"]; l = b["latency_ms"]
    n = b["requests"] + b["errors"]
    ms = 1000 * r["cpu_s"] / n if n else float("nan")
    print(f"| {r['server']} | {r['concurrency']} | {b['rps']:.0f} | {l['p50']:.1f} | "
          f"{l['p90']:.1f} | {l['p99']:.1f} | {b['errors']} | {ms:.2f} | {2000 / ms:.0f} | "
          f"{r['load']} |")
PYEOF
