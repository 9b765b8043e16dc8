#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Model-checks tests/model/throttle.pml with spin: builds one verifier (pan) per
# parameter set and runs it to completion.  Usage:
#   spin_throttle.sh MODEL.pml SET
# SET is one of:
#   safety   the protocol as lib/ring.c implements it, several bounds: every
#            run must explore its whole state space and find no error;
#   broken   the clock read before W: every run must find an over-grant
#            (shows that the monitor can fail);
#   account  the bookkeeping of lib/ring.c (inflight equals the uses W names;
#            no SHMT_ECORRUPT from a merely stale W): must find no error,
#            and each of two earlier versions (OLD_STALE, OLD_SKIP) must
#            fail it.
# Fails when spin or cc is missing.  Prints the states explored per run.
set -euo pipefail

model=${1:?usage: spin_throttle.sh MODEL.pml SET}
set_name=${2:?usage: spin_throttle.sh MODEL.pml SET}

for tool in spin cc; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "spin_throttle: $tool is missing (Debian package: spin, gcc)" >&2
    exit 1
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/spin_throttle.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$model" "$work/throttle.pml"

# One run: NAME EXPECT(pass|fail) spin-defines...
# A state space this size fits the memory limit below many times over; a run
# that hits the limit or the depth bound is a failure, not a pass.
run_one() {
  local name=$1 expect=$2; shift 2
  local out errors states trans depth t0 t1
  (cd "$work" && rm -f pan pan.* && spin -a "$@" throttle.pml >spin.log 2>&1) || {
    cat "$work/spin.log" >&2; echo "FAIL $name: spin -a failed" >&2; return 1; }
  (cd "$work" && cc -O2 -w -DSAFETY -DCOLLAPSE -DVECTORSZ=1024 -DMEMLIM=2048 \
      -o pan pan.c) || { echo "FAIL $name: cc failed" >&2; return 1; }
  t0=$(date +%s.%N)
  out=$(cd "$work" && ./pan -m100000 2>&1) || true
  t1=$(date +%s.%N)
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' <<<"$out" | tail -1)
  states=$(sed -n 's/^ *\([0-9e.+]*\) states, stored.*/\1/p' <<<"$out" | tail -1)
  trans=$(sed -n 's/^ *\([0-9e.+]*\) transitions.*/\1/p' <<<"$out" | tail -1)
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' <<<"$out" | tail -1)
  printf 'spin %-8s %-22s states %10s transitions %10s depth %4s errors %s %5.1fs  (%s)\n' \
    "$set_name" "$name" "${states:-?}" "${trans:-?}" "${depth:-?}" "${errors:-?}" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$*"
  if [ -z "$errors" ]; then
    echo "$out" >&2; echo "FAIL $name: no result from pan" >&2; return 1
  fi
  if [ "$expect" = pass ]; then
    if [ "$errors" != 0 ]; then
      (cd "$work" && spin -t -p "$@" throttle.pml 2>&1 | tail -60) >&2 || true
      echo "FAIL $name: spin found an error" >&2; return 1
    fi
    if grep -qE 'max search depth too small|out of memory|Search not completed' <<<"$out"; then
      echo "$out" >&2; echo "FAIL $name: search incomplete" >&2; return 1
    fi
  elif [ "$errors" = 0 ]; then
    echo "FAIL $name: spin found no error in a model that must fail" >&2; return 1
  fi
}

# Small bounds: limit 1..3, slack_uses 1..2, three callers (or two with a
# daemon: a fourth process multiplies the states by ten).
failed=0
run() { run_one "$@" || failed=1; }

case "$set_name" in
safety)
  run L1B1-3c-kill pass -DL=1 -DB=1 -DC=1 -DS=1 -DTMAX=3 -DCALLS=1 -DDAEMON=0
  run L1B1-2c-daemon pass -DL=1 -DB=1 -DC=1 -DS=1 -DTMAX=3 -DNCALLERS=2 \
    -DCALLS0=2 -DCALLS=1 -DDPASSES=1
  run L2B1-3c pass -DL=2 -DB=1 -DC=2 -DS=1 -DTMAX=3 -DCALLS=1 -DDAEMON=0 -DKILL=0
  run L2B2-3c pass -DL=2 -DB=2 -DC=2 -DS=1 -DTMAX=3 -DCALLS=1 -DDAEMON=0 -DKILL=0
  run L3B2-3c pass -DL=3 -DB=2 -DC=1 -DS=1 -DTMAX=3 -DCALLS0=2 -DCALLS=1 \
    -DDAEMON=0 -DKILL=0
  ;;
broken)
  run L1B1-broken fail -DL=1 -DB=1 -DC=1 -DS=1 -DTMAX=3 -DCALLS=1 -DDAEMON=0 -DBROKEN
  run L2B1-broken fail -DL=2 -DB=1 -DC=2 -DS=1 -DTMAX=4 -DCALLS0=2 -DCALLS=1 \
    -DDAEMON=0 -DBROKEN
  ;;
account)
  # The bookkeeping as well as safety, as lib/ring.c does it now.
  run L1B1-3c-account pass -DL=1 -DB=1 -DC=1 -DS=1 -DTMAX=3 -DCALLS=1 -DDAEMON=0 \
    -DKILL=0 -DACCOUNT
  run L1B1-2c-daemon-account pass -DL=1 -DB=1 -DC=1 -DS=1 -DTMAX=3 -DNCALLERS=2 \
    -DCALLS0=2 -DCALLS=1 -DDPASSES=1 -DKILL=0 -DACCOUNT
  run L2B1-3c-account-skip pass -DL=2 -DB=1 -DC=1 -DS=1 -DTMAX=2 -DCALLS=1 \
    -DDAEMON=0 -DKILL=0 -DACCOUNT
  # The two earlier versions: spin must find each one's fault.
  run L1B1-3c-old-stale fail -DL=1 -DB=1 -DC=1 -DS=1 -DTMAX=3 -DCALLS=1 \
    -DDAEMON=0 -DKILL=0 -DACCOUNT -DOLD_STALE
  run L2B1-3c-old-skip fail -DL=2 -DB=1 -DC=1 -DS=1 -DTMAX=2 -DCALLS=1 \
    -DDAEMON=0 -DKILL=0 -DACCOUNT -DOLD_SKIP
  ;;
*)
  echo "spin_throttle: unknown set $set_name" >&2; exit 2 ;;
esac
if [ "$failed" != 0 ]; then
  echo "spin $set_name: FAILED" >&2
  exit 1
fi
echo "spin $set_name: ok"
