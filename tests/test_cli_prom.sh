#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `shmthrottle stat --prometheus` writes what the daemon's /metrics endpoint
# serves, with the same metric names: a daemon on a loopback port it picks
# (port 0, read back from its log) is scraped with curl, the CLI prints the
# same segment, and every family the endpoint has (but the daemon's own
# housekeeping lag histogram) is in the CLI's output with its type, and
# the values the test made are there.  promtool (when given) checks the
# CLI's output.
# Usage: test_cli_prom.sh SHMTHROTTLE SHMTHROTTLED CURL [PROMTOOL]
set -euo pipefail

cli=$1 daemon=$2 curl=$3 promtool=${4:-}
dir=$(mktemp -d /tmp/shmt-test-prom-XXXXXX)
seg=/shmt-test-prom-$$
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  "$cli" -s "$seg" destroy --force >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

fail() {
  echo "test_cli_prom: FAIL: $*" >&2
  exit 1
}

cat >"$dir/d.conf" <<CONF
[segment]
name = $seg
[limiter api]
limit = 5
window = 1h
slack_time = 1m
slack_uses = 1
[daemon]
metrics = 127.0.0.1:0
CONF
"$daemon" -f -c "$dir/d.conf" 2>"$dir/d.log" &
pid=$!
url=
for _ in $(seq 1 2000); do
  url=$(sed -n 's|.*metrics on \(http://[^ ]*/metrics\).*|\1|p' "$dir/d.log")
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || fail "the daemon exited: $(cat "$dir/d.log")"
  sleep 0.01
done
[ -n "$url" ] || fail "the daemon did not say where its metrics are"

"$cli" -s "$seg" try api >/dev/null || fail "try"
"$cli" -s "$seg" try api >/dev/null || fail "try"
"$cli" -s "$seg" set k1 v1 >/dev/null || fail "set"
"$cli" -s "$seg" set k2 v2 >/dev/null || fail "set"

"$cli" -s "$seg" stat --prometheus >"$dir/cli.txt" || fail "stat --prometheus exited $?"
"$curl" -sf "$url" >"$dir/http.txt" || fail "scrape $url"

grep -qx 'shmthrottle_dict_items 2' "$dir/cli.txt" || fail "no 'shmthrottle_dict_items 2'"
grep -qx 'shmthrottle_grants_total{limiter="api"} 2' "$dir/cli.txt" ||
  fail "no 'shmthrottle_grants_total{limiter=\"api\"} 2'"
grep -qx 'shmthrottle_in_flight_uses{limiter="api"} 2' "$dir/cli.txt" ||
  fail "no in-flight uses of api"
# Every family of the endpoint, with its type, but the daemon's own lag.
grep '^# TYPE ' "$dir/http.txt" | grep -v 'daemon_housekeeping_lag_seconds' |
  sort >"$dir/http.types"
grep '^# TYPE ' "$dir/cli.txt" | sort >"$dir/cli.types"
[ -s "$dir/http.types" ] || fail "the endpoint served no families"
diff -u "$dir/http.types" "$dir/cli.types" >&2 ||
  fail "the CLI's families differ from the endpoint's"
if grep -q 'daemon_housekeeping_lag_seconds' "$dir/cli.txt"; then
  fail "the CLI printed a lag histogram it cannot know"
fi
if [ -n "$promtool" ]; then
  "$promtool" check metrics <"$dir/cli.txt" >&2 || fail "promtool check metrics"
  echo "test_cli_prom: promtool check metrics: valid"
fi
# --json and --prometheus exclude each other (usage error, exit 2).
set +e
"$cli" -s "$seg" --json stat --prometheus >/dev/null 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || fail "--json with --prometheus exited $rc, want 2"
echo "test_cli_prom: $(wc -l <"$dir/cli.types") families, the same as the endpoint's"
