#!/bin/sh
# SPDX-License-Identifier: MIT
# Instructions per call of each read-side variant of shmthrottle-rcucost
# (bench/rcucost.c), which a loaded machine does not change: callgrind
# counts rcucost_loop over N and 2N calls (each run: a warm-up of N/10 and
# 7 rounds of N), and the difference / (7.1 N) is one call's.  The call
# with no read side ("none") is subtracted for read_side_instr.
#
#   bench/rcucost-instr.sh [BUILD_DIR [N]]    (default build 100000)
set -eu
build=${1:-build}
n=${2:-100000}
bin=$build/bench/shmthrottle-rcucost
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v valgrind >/dev/null || { echo "rcucost-instr: needs valgrind" >&2; exit 1; }

count() { # OBJECT PRELOAD N -> instructions in rcucost_loop
	out=$tmp/cg.out
	if [ "$2" = start ]; then pre=$1; else pre=; fi
	LD_PRELOAD=$pre valgrind --tool=callgrind --toggle-collect=rcucost_loop \
	    --callgrind-out-file="$out" "$bin" -1 "$1" "$3" >/dev/null 2>&1 ||
	    { echo failed; return; }
	awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

for load in start dlopen; do
	for dialect in gd gnu2 ie; do
		base=
		for flv in none memb memb-flag bp qsbr memb-one qsbr-one; do
			obj=$build/bench/rcucost-$flv-$dialect.so
			a=$(count "$obj" $load "$n")
			b=$(count "$obj" $load $((2 * n)))
			if [ "$a" = failed ] || [ "$b" = failed ]; then
				echo "rcucost_instr flavour=$flv tls=$dialect load=$load failed"
				continue
			fi
			per=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.1f", (b - a) / (7.1 * n) }')
			[ -n "$base" ] || base=$per
			rs=$(awk -v p="$per" -v z="$base" 'BEGIN { printf "%.1f", p - z }')
			echo "rcucost_instr flavour=$flv tls=$dialect load=$load instr_per_call=$per read_side_instr=$rs"
		done
	done
done
