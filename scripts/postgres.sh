#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests and local runs (Debian's postgresql; never the system
# cluster): its own folder, a free port on 127.0.0.1, trust authentication for local users only.
#   scripts/postgres.sh start DIR     # initdb when DIR is new; prints the URL (also in DIR/url)
#   scripts/postgres.sh stop DIR      # fast shutdown
#   scripts/postgres.sh restart DIR   # immediate stop (as a crash), then start on the same port
# Run as root (CI containers), the cluster belongs to the postgres user Debian's package makes:
# PostgreSQL refuses to run as root. DIR must be a new or an earlier DIR of this script.
set -euo pipefail
cmd="${1:-}"; dir="${2:-}"
if [[ -z "$cmd" || -z "$dir" ]]; then echo "usage: $0 start|stop|restart DIR" >&2; exit 2; fi
bindir=""
for d in /usr/lib/postgresql/*/bin; do [[ -x "$d/initdb" ]] && bindir="$d"; done
if [[ -z "$bindir" ]]; then
  echo "postgres.sh: PostgreSQL is not installed (bash scripts/setup.sh installs postgresql)" >&2
  exit 1
fi
as_owner() {
  if [[ "$(id -u)" -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
data="$dir/data"
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
start() {
  local port
  port="$(cat "$dir/port" 2>/dev/null || free_port)"
  # syncfs: after an immediate stop, recovery syncs the file system once instead of fsyncing
  # every file of the cluster (8 s to under 1 s here); durability of commits is unchanged.
  as_owner "$bindir/pg_ctl" -D "$data" -l "$dir/postgres.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c recovery_init_sync_method=syncfs" start >/dev/null || {
    echo "postgres.sh: the cluster in $data did not start; log:" >&2
    tail -20 "$dir/postgres.log" >&2 || true
    exit 1
  }
  echo "$port" > "$dir/port"
  local url="postgresql://hotline@127.0.0.1:$port/hotline"
  if ! as_owner "$bindir/psql" -h 127.0.0.1 -p "$port" -U hotline -d postgres -tAc \
      "SELECT 1 FROM pg_database WHERE datname = 'hotline'" | grep -q 1; then
    as_owner "$bindir/createdb" -h 127.0.0.1 -p "$port" -U hotline hotline
  fi
  echo "$url" > "$dir/url"
  echo "$url"
}
case "$cmd" in
  start)
    mkdir -p "$dir"
    if [[ ! -f "$data/PG_VERSION" ]]; then
      [[ "$(id -u)" -eq 0 ]] && chown postgres: "$dir"
      # The folders above DIR must let the cluster's owner through. --no-sync: the new cluster's
      # files are not fsynced (a throwaway cluster; 5 s to under 2 s); commits later are.
      as_owner "$bindir/initdb" -D "$data" -U hotline -A trust -E UTF8 --no-locale --no-sync >"$dir/initdb.log" 2>&1 || {
        echo "postgres.sh: initdb failed; log: $dir/initdb.log" >&2; tail -5 "$dir/initdb.log" >&2; exit 1; }
    fi
    start ;;
  stop)
    if [[ -f "$data/postmaster.pid" ]]; then
      as_owner "$bindir/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null
    fi
    echo "postgres.sh: stopped $dir" ;;
  restart)
    as_owner "$bindir/pg_ctl" -D "$data" -m immediate -w -t 60 stop >/dev/null
    start ;;
  *) echo "usage: $0 start|stop|restart DIR" >&2; exit 2 ;;
esac
