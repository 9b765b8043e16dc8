#!/bin/sh
# SPDX-License-Identifier: MIT
# What one dictionary get and one set cost in instructions and cache misses,
# counted by callgrind's cache simulation (a 32 KiB L1, a 32 MiB last level),
# for the library and for the bench's mutex peer: counts that do not depend
# on the machine's load, unlike the bench's timings.  One bench run per row
# (1 M keys of about 8 bytes, values of 16, Zipf 0.99, analyzer off, one
# thread), each counting only inside the measured call:
#   shmt get   shmt_get           (the library's call alone)
#   shmt set   shmt_op_set        (the bench's op: the key's formatting too)
#   mutex get  mx_op_get          (the same, the peer's op)
#   mutex set  mx_op_set
# and per call = the run's totals / the ops of its SUMMARY line.
#
#   bench/dictcost-callgrind.sh [BENCH [SECONDS]]
#       (default build/bench/shmthrottle-bench, 1 s measured per row)
#
# The bench stores the million keys under valgrind first (a minute or more);
# on a loaded machine its 30 s wait for the workers may run out: run again.
set -eu
bench=${1:-build/bench/shmthrottle-bench}
secs=${2:-1}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "load before: $(cat /proc/loadavg)"
row() {
	sys=$1 work=$2 fn=$3
	valgrind --tool=callgrind --cache-sim=yes --LL=33554432,16,64 \
	    --collect-atstart=no --toggle-collect="$fn" \
	    --callgrind-out-file="$dir/out" "$bench" -W "$work" -s "$sys" \
	    -d "$secs" -w 0 --no-floor --no-clock --no-analyzer --seed 1 \
	    >"$dir/log" 2>&1 || true
	ops=$(sed -n 's/.* ops=\([0-9]*\) .*/\1/p' "$dir/log" | head -n 1)
	if [ -z "$ops" ] || [ "$ops" = 0 ]; then
		echo "$sys $work: no SUMMARY (see below)"
		grep -v '^==' "$dir/log" | tail -n 3
		return 0
	fi
	callgrind_annotate "$dir/out" 2>/dev/null | grep 'PROGRAM TOTALS' |
	    sed 's/([ 0-9.]*%)//g' | tr -d , |
	    awk -v n="$ops" -v t="$sys $work" '{
		printf "%-16s calls %7d  Ir %5.0f  L1 read misses %.2f  " \
		    "L1 write misses %.2f  LL read misses %.2f\n",
		    t, n, $1 / n, $5 / n, $6 / n, $8 / n }'
}
row shmt dict-get shmt_get
row shmt dict-set shmt_op_set
row mutex dict-get mx_op_get
row mutex dict-set mx_op_set
echo "load after:  $(cat /proc/loadavg)"
