#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts shmthrottled on its
# built-in default config, runs demo worker processes that share its
# limiters, shows what the CLI sees, and stops the daemon cleanly (the
# segment is removed on exit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" >/dev/null
bin=build
daemon=$bin/daemon/shmthrottled
cli=$bin/cli/shmthrottle
demo=$bin/demo/shmthrottle-demo
export SHMTHROTTLE_SEGMENT=/shmthrottle

echo "== starting shmthrottled (built-in default config, segment $SHMTHROTTLE_SEGMENT)"
"$daemon" --foreground --unlink-on-exit &
dpid=$!
trap 'kill -TERM $dpid 2>/dev/null || true; wait $dpid 2>/dev/null || true' EXIT
# Wait (bounded) until the daemon has published its heartbeat.
for _ in $(seq 100); do
  if "$cli" --json stat 2>/dev/null | grep -q '"alive": *true'; then break; fi
  sleep 0.1
done

echo "== shmthrottle stat"
"$cli" stat
echo
echo "== 4 worker processes for 3 s"
"$demo" -p 4 -d 3
echo
echo "== shmthrottle limiters"
"$cli" limiters
echo
echo "== shmthrottle buckets api"
"$cli" buckets api
echo
echo "== shmthrottle next-key keys / try per-ip 192.0.2.1"
"$cli" next-key keys || true
"$cli" try per-ip 192.0.2.1 || true
echo
echo "== stopping shmthrottled"
kill -TERM $dpid
wait $dpid
trap - EXIT
echo "== stopped cleanly; segment removed"
