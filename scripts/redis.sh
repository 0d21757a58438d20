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
# The pid file names a running redis-server: alive, not a zombie (a server killed with -9 whose
# parent has not reaped it still passes kill -0), and not another program that took the pid.
running() {
  [[ -f "$pidfile" ]] || return 1
  local pid; pid="$(cat "$pidfile")"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" != Z* ]] || return 1
  [[ "$(ps -o comm= -p "$pid" 2>/dev/null)" == redis-server* ]]
}
case "$cmd" in
  start)
    command -v redis-server >/dev/null || { echo "redis.sh: redis-server not installed (bash scripts/setup.sh)" >&2; exit 1; }
    mkdir -p "$dir"
    if running; then
      echo "redis.sh: already running on port $port (pid $(cat "$pidfile"))"; exit 0
    fi
    rm -f "$pidfile"  # stale: its server is gone
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
    if running; then
      pid="$(cat "$pidfile")"
      kill "$pid"
      for _ in $(seq 1 100); do running || break; sleep 0.05; done
    fi
    rm -f "$pidfile"
    echo "redis.sh: stopped port $port" ;;
  *) echo "usage: $0 start|stop PORT [DIR]" >&2; exit 2 ;;
esac
