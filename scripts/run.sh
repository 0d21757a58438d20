#!/usr/bin/env bash
# `make run`: bash scripts/run.sh build/hotline
# Builds the default model's plan for this machine when no matching plan is cached, then runs
# hotline serve on 127.0.0.1 (gRPC 50051, HTTP 8080) in the foreground. Ctrl-C stops it
# gracefully.
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
# `hotline predict` builds and caches the plan for this machine when it is missing, so the server
# starts from a cached plan.
echo "run: preparing the plan for $MODEL (built once, then cached)"
echo "你好" | "$HOTLINE" predict --model "$MODEL" >/dev/null
cat <<'MSG'
run: starting hotline serve (gRPC 127.0.0.1:50051, HTTP 127.0.0.1:8080). Once ready, try:

  curl -s http://127.0.0.1:8080/readyz
  curl -s -X POST http://127.0.0.1:8080/v1/understand \
       -H 'Content-Type: application/json' \
       -d '{"text": "朝阳区建国路88号工地晚上十一点还在打桩"}'
  curl -s http://127.0.0.1:8080/metrics | grep hotline_requests_total

MSG
exec "$HOTLINE" serve --config "$CONFIG" --model-repo "$(dirname "$MODEL")"
