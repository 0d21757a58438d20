#!/usr/bin/env bash
# `make run`: bash scripts/run.sh build/hotline
# Runs hotline serve on 127.0.0.1 (gRPC 50051, HTTP 8080) in the foreground, with the dialog when
# the config has a dialog: section (config/server.yaml does). Ctrl-C stops it gracefully.
set -euo pipefail
cd "$(dirname "$0")/.."
HOTLINE="${1:-build/hotline}"
MODEL="${HOTLINE_MODEL:-models/default}"
CONFIG="${HOTLINE_CONFIG:-config/server.yaml}"
if [ ! -x "$HOTLINE" ]; then
  echo "run: $HOTLINE not found; build first (make build)" >&2
  exit 1
fi
if [ ! -f "$MODEL/model.yaml" ]; then
  echo "run: no model at $MODEL (expected $MODEL/model.yaml)" >&2
  exit 1
fi
# The server builds the plan for this machine at its first start (the precision config/server.yaml
# asks for, `auto` by default) and caches it under $MODEL/cache/; later starts load it.
cat <<'MSG'
run: starting hotline serve (gRPC 127.0.0.1:50051, HTTP 127.0.0.1:8080). Once ready, try:

  curl -s http://127.0.0.1:8080/readyz
  curl -s -X POST http://127.0.0.1:8080/v1/understand \
       -H 'Content-Type: application/json' \
       -d '{"text": "朝阳区建国路88号工地晚上十一点还在打桩"}'
  curl -s http://127.0.0.1:8080/metrics | grep hotline_requests_total

A call (config/server.yaml's dialog: section; work orders go to var/work_orders.sqlite):

  curl -s -X POST http://127.0.0.1:8080/v1/converse -H 'Content-Type: application/json' \
       -d '{"call_id": "demo-1", "text": "我家停水了"}'
  curl -s -X POST http://127.0.0.1:8080/v1/calls/demo-1/end -d '{}'
  build/hotline chat --server 127.0.0.1:50051 --show-nlu     # a call from the terminal

The operators' console (live calls, orders, hotspots, SLA): http://127.0.0.1:8080/console/

MSG
exec "$HOTLINE" serve --config "$CONFIG" --model-repo "$(dirname "$MODEL")"
