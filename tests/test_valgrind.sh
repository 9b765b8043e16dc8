#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# valgrind memcheck of the shmthrottle tool (create, stat, limiters,
# buckets, try, next-key, set, get, incr, keys, hit, del, check and
# check --repair, destroy, each also with --json where it reads) and of one demo worker, against a
# segment made from the example config.  Every run must be clean: no
# invalid access, no uninitialised value used, no leak.
# usage: test_valgrind.sh CLI DEMO CONFIG
# Exits 77 (skipped) when valgrind is not installed.
set -uo pipefail
cli=$1 demo=$2 config=$3
if ! command -v valgrind >/dev/null 2>&1; then
  echo "test_valgrind: valgrind is not installed: skipped"
  exit 77
fi
seg=/shmt-test-$$-valgrind
log=$(mktemp -d)
trap 'rm -f /dev/shm/"${seg#/}"; rm -rf "$log"' EXIT
vg=(valgrind --quiet --error-exitcode=99 --leak-check=full
    --show-leak-kinds=definite,indirect,possible
    --errors-for-leak-kinds=definite,indirect,possible)
failed=0 n=0

# run EXPECTED-STATUS ARGS...: one command under memcheck.
run() {
  local want=$1; shift
  local out="$log/$n.txt" rc
  n=$((n + 1))
  "${vg[@]}" --log-file="$out.vg" "$@" >"$out" 2>&1 </dev/null
  rc=$?
  if [ "$rc" -eq 99 ] || [ -s "$out.vg" ]; then
    echo "test_valgrind: memcheck errors in: $*"
    cat "$out.vg"
    failed=1
  elif [ "$rc" -ne "$want" ]; then
    echo "test_valgrind: exit $rc (want $want) from: $*"
    cat "$out"
    failed=1
  else
    echo "ok: $*"
  fi
}

c=("$cli" -s "$seg")
run 0 "${c[@]}" create -c "$config" --dict 2M --dict-shards 1 --counters 64K --arena 1M
run 0 "${c[@]}" stat
run 0 "${c[@]}" --json stat
run 0 "${c[@]}" limiters
run 0 "${c[@]}" limiters --json
run 0 "${c[@]}" buckets api
run 0 "${c[@]}" try api
run 0 "${c[@]}" try per-ip 192.0.2.1
run 0 "${c[@]}" next-key keys
run 0 "${c[@]}" set greeting hello
run 0 "${c[@]}" get greeting
run 0 "${c[@]}" get greeting --json
run 1 "${c[@]}" get absent
run 0 "${c[@]}" incr counter 3
run 0 "${c[@]}" keys
run 0 "${c[@]}" keys --json
run 0 "${c[@]}" hit page
run 0 "${c[@]}" del greeting
run 2 "${c[@]}" try
run 0 "${c[@]}" check
run 0 "${c[@]}" check --json
run 0 "$demo" -s "$seg" -p 1 -d 0.5
run 0 "${c[@]}" check
run 0 "${c[@]}" check --repair --json
run 0 "${c[@]}" destroy --force
exit $failed
