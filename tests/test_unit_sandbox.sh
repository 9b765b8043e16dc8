#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The unit's hardening, tried on the daemon itself: shmthrottled runs as
# the systemd unit would run it (User= an unprivileged user and group,
# NoNewPrivileges=, CapabilityBoundingSet= empty, ProtectSystem=strict:
# every file system read-only except /dev, /proc, /sys and the state
# directory), in a private mount namespace of its own.  There it must
# create the segment in /dev/shm with mode 0660 and its group, serve
# workers of that group (and refuse others), keep a live worker of another
# user (no reaping of live slots), serve metrics, and write its snapshot
# into the state directory at stop.  A control run with the snapshot
# outside the state directory must fail to write it, which shows that the
# sandbox does restrict writes.  Needs root, unshare and setpriv; exits 77
# (skipped) without them.  Usage: test_unit_sandbox.sh BUILD_DIR
set -euo pipefail

build=$(cd "$1" && pwd)
daemon=$build/daemon/shmthrottled
cli=$build/cli/shmthrottle
user=65534                   # the daemon's user and group (nobody:nogroup)
group=65534
other=65533                  # a worker's user id
# Root's own calls (stat, destroy) trust the segment of the daemon's user
# only when told to, as an operator would tell them.
export SHMTHROTTLE_OWNER=$user

if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null ||
    ! command -v setpriv >/dev/null || ! command -v curl >/dev/null ||
    ! unshare -m --propagation private true 2>/dev/null; then
  echo "test_unit_sandbox: SKIP: needs root, unshare (mount namespaces), setpriv and curl"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/shmt-sandbox.XXXXXX")
seg=/shmt-sandbox-$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$cli" -s "$seg" destroy --force >/dev/null 2>&1 || true
  rm -rf -- "$work"
}
trap cleanup EXIT

fail() {
  echo "test_unit_sandbox: FAIL: $*" >&2
  [ -f "$work/state/d.log" ] && cat "$work/state/d.log" >&2
  exit 1
}

chmod 0755 "$work"
mkdir -m 0750 "$work/state"
chown "$user:$group" "$work/state"

# Bounded wait: up to 20 s for FILE to contain TEXT.
wait_for() {
  for _ in $(seq 400); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "no '$2' in $1"
}

# Start the daemon sandboxed with snapshot path SNAP; sets $dpid.
start_sandboxed() {
  local snap=$1
  cat >"$work/d.conf" <<CONF
[segment]
name = $seg
mode = 0660

[limiter a]
limit = 5
window = 1h
slack_time = 1m
slack_uses = 1

[dictionary]
enabled = no

[counters]
enabled = no

[analyzer]
enabled = no

[daemon]
snapshot = $snap
metrics = 127.0.0.1:0
CONF
  chmod 0644 "$work/d.conf"
  : >"$work/state/d.log"
  # The mounts that hold what the daemon might write, made read-only in
  # the namespace only; the state directory is bound writable first.
  local ro
  ro=$(for p in / /etc /var /tmp /usr "$work"; do findmnt -no TARGET -T "$p"; done | sort -u | tr '\n' ' ')
  # unshare and sh exec, so $! is the daemon's pid.
  unshare -m --propagation private sh -c '
    state=$1 ro=$2; shift 2
    mount --bind "$state" "$state" || exit 90
    for m in $ro; do mount -o remount,bind,ro "$m" || exit 91; done
    touch "$state/../probe" 2>/dev/null && exit 92
    exec setpriv --reuid='"$user"' --regid='"$group"' --clear-groups \
      --no-new-privs --bounding-set=-all --inh-caps=-all "$@" 2>>"$state/d.log"
  ' sandbox "$work/state" "$ro" "$daemon" -f -c "$work/d.conf" &
  dpid=$!
  pids+=("$dpid")
  for _ in $(seq 400); do
    grep -q "running on segment" "$work/state/d.log" 2>/dev/null && return 0
    kill -0 "$dpid" 2>/dev/null || { wait "$dpid" || fail "the sandbox or daemon exited with $?"; }
    sleep 0.05
  done
  fail "the daemon never ran"
}

# Stop the daemon; its exit status goes to $drc (no subshell: only this
# shell can wait for it).
stop_daemon() {
  kill -TERM "$dpid"
  drc=0
  wait "$dpid" || drc=$?
}

start_sandboxed "$work/state/state.snap"

# The segment: the daemon's user and group, mode 0660.
[ "$(stat -c '%a %u %g' "/dev/shm$seg")" = "660 $user $group" ] ||
  fail "segment is $(stat -c '%a %u %g' "/dev/shm$seg")"

# A worker of the group uses it; a worker outside the group is refused.
for _ in 1 2 3; do
  case "$(setpriv --reuid=$other --regid=$group --clear-groups "$cli" -s "$seg" try a)" in
    granted*) ;;
    *) false ;;
  esac ||
    fail "a worker in the group was not granted"
done
rc=0
setpriv --reuid=$other --regid=$other --clear-groups "$cli" -s "$seg" try a \
  >/dev/null 2>"$work/refused" || rc=$?
[ "$rc" -eq 3 ] || fail "a worker outside the group got exit $rc"

# A live worker of another user keeps its slot through housekeeping runs.
setpriv --reuid=$other --regid=$group --clear-groups "$cli" -s "$seg" \
  watch -n 100 -d 0.1 </dev/null >/dev/null 2>&1 &
holder=$!
pids+=("$holder")
runs() { "$cli" -s "$seg" --json stat | sed -n 's/.*"housekeeping_runs": *\([0-9]*\).*/\1/p'; }
"$cli" -s "$seg" --json stat >"$work/stat0.json"
r0=$(runs)
for _ in $(seq 400); do
  [ "$(runs)" -ge $((r0 + 2)) ] && break
  sleep 0.05
done
[ "$(runs)" -ge $((r0 + 2)) ] || fail "housekeeping did not run"
kill -0 "$holder" || fail "the holder exited early"
"$cli" -s "$seg" --json stat >"$work/stat.json"
grep -q '"reaped": *0' "$work/stat.json" || fail "slots were reaped: $(cat "$work/stat.json")"
grep -q '"stale": *0' "$work/stat.json" || fail "live slots counted stale"
kill "$holder"; wait "$holder" 2>/dev/null || true

# Metrics from the sandboxed daemon.
url=$(sed -n 's/.*metrics on \(http:[^ ]*\).*/\1/p' "$work/state/d.log")
curl -sS --max-time 10 "$url" >"$work/metrics" || fail "no metrics at '$url'"
grep -qx 'shmthrottle_grants_total{limiter="a"} 3' "$work/metrics" ||
  fail "metrics: $(grep grants_total "$work/metrics")"

# At stop, the snapshot lands in the state directory.
stop_daemon
[ "$drc" -eq 0 ] || fail "the daemon did not stop cleanly (exit $drc)"
[ -f "$work/state/state.snap" ] || fail "no snapshot in the state directory"
[ "$(stat -c '%u' "$work/state/state.snap")" = "$user" ] || fail "snapshot owner"
! grep -q "error" "$work/state/d.log" || fail "the daemon logged an error"
echo "test_unit_sandbox: ran as $user:$group with / read-only; segment 0660, workers of the group served, snapshot in the state directory"

# Control: a snapshot outside the state directory cannot be written.
"$cli" -s "$seg" destroy --force >/dev/null
start_sandboxed "$work/elsewhere.snap"
stop_daemon
[ ! -e "$work/elsewhere.snap" ] || fail "the daemon wrote outside the state directory"
grep -q "Read-only file system" "$work/state/d.log" ||
  fail "the control run did not hit the read-only file system"
echo "test_unit_sandbox: control: a snapshot outside the state directory fails (read-only)"
