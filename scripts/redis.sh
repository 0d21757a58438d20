#!/usr/bin/env bash
# Starts or stops a private redis-server for tests and local runs (never the system one).
#   scripts/redis.sh start PORT [DIR]   # DIR default /tmp/hotline-redis-PORT; waits until it answers
#   scripts/redis.sh stop PORT [DIR]    # stops the server started with that PORT/DIR
#   REDIS_PASSWORD=pw scripts/redis.sh start PORT [DIR]   # clients must AUTH (redis://:pw@host)
# The server listens on 127.0.0.1 only, keeps its pid file, log and data in DIR, and saves nothing
# to disk (sessions are short-lived; a restart loses calls in progress, never work orders).
set -euo pipefail
cmd="${1:-}"; port="${2:-}"
if [[ -z "$cmd" || -z "$port" || ! "$port" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 start|stop PORT [DIR]" >&2; exit 2
fi
dir="${3:-/tmp/hotline-redis-$port}"
pidfile="$dir/redis.pid"
case "$cmd" in
  start)
    command -v redis-server >/dev/null || { echo "redis.sh: redis-server not installed (bash scripts/setup.sh)" >&2; exit 1; }
    mkdir -p "$dir"
    if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "redis.sh: already running on port $port (pid $(cat "$pidfile"))"; exit 0
    fi
    auth=()
    if [[ -n "${REDIS_PASSWORD:-}" ]]; then auth=(--requirepass "$REDIS_PASSWORD"); fi
    redis-server --port "$port" --bind 127.0.0.1 --daemonize yes --pidfile "$pidfile" \
      --dir "$dir" --logfile "$dir/redis.log" --save "" --appendonly no "${auth[@]}" >/dev/null
    for _ in $(seq 1 100); do
      if REDISCLI_AUTH="${REDIS_PASSWORD:-}" redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
        echo "redis.sh: redis-server on 127.0.0.1:$port (pid $(cat "$pidfile" 2>/dev/null))"; exit 0
      fi
      sleep 0.05
    done
    echo "redis.sh: redis-server did not answer on port $port; log: $dir/redis.log" >&2
    tail -5 "$dir/redis.log" >&2 || true
    exit 1 ;;
  stop)
    if [[ -f "$pidfile" ]]; then
      pid="$(cat "$pidfile")"
      if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      fi
      rm -f "$pidfile"
    fi
    echo "redis.sh: stopped port $port" ;;
  *) echo "usage: $0 start|stop PORT [DIR]" >&2; exit 2 ;;
esac
