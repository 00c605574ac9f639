#!/usr/bin/env bash
# A real redis-server on loopback for the tests that need one.
#   redis_fixture.sh start DIR   starts it on a free port, writes DIR/port
#   redis_fixture.sh stop DIR    stops it
set -euo pipefail
cmd=$1 dir=$2
mkdir -p "$dir"
case $cmd in
  start)
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then exit 0; fi
    # Try ports until one is free: redis-server exits at once when its port is taken.
    for attempt in $(seq 1 50); do
      port=$(( 20000 + (RANDOM % 20000) ))
      rm -f "$dir/pid"
      redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize yes --pidfile "$dir/pid" --logfile "$dir/redis.log" --dir "$dir"
      for _ in $(seq 1 50); do
        if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
          echo "$port" > "$dir/port"
          echo "redis-server on 127.0.0.1:$port"
          exit 0
        fi
        sleep 0.1
      done
      [ -f "$dir/pid" ] && kill "$(cat "$dir/pid")" 2>/dev/null || true
    done
    echo "could not start redis-server (see $dir/redis.log)" >&2
    exit 1
    ;;
  stop)
    if [ -f "$dir/pid" ]; then kill "$(cat "$dir/pid")" 2>/dev/null || true; rm -f "$dir/pid"; fi
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
