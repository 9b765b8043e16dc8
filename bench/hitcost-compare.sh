#!/bin/sh
# SPDX-License-Identifier: MIT
# Sets two builds of shmthrottle-hitcost (bench/hitcost.c) side by side:
# ROUNDS rounds alternated A, B, A, B, ... and the median ns per hit of
# each workload, with the load average before and after (figures taken on a
# loaded machine are not clean; say so beside them).
#
#   bench/hitcost-compare.sh A B [ROUNDS [HITS]]     (default 9 1000000)
#
# To set this tree against another one (e.g. main's sub-window ring), build
# the program the same way on both:
#   cc -O2 -std=gnu11 -o /tmp/hitcost-X bench/hitcost.c -Ilib/include \
#     build/lib/libshmthrottle.a $(pkg-config --libs ck libsodium) \
#     -latomic -lpthread
set -eu
a=$1 b=$2 rounds=${3:-9} hits=${4:-1000000}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "load before: $(cat /proc/loadavg)"
i=0
while [ "$i" -lt "$rounds" ]; do
	"$a" "$hits" 1 | sed 's/^/A /' >>"$out"
	"$b" "$hits" 1 | sed 's/^/B /' >>"$out"
	i=$((i + 1))
done
echo "load after:  $(cat /proc/loadavg)"
for w in hot spread burst; do
	for s in A B; do
		grep "^$s hitcost workload=$w " "$out" |
		    sed 's/.*ns_per_hit=\([0-9.]*\) bytes=\([0-9]*\)/\1 \2/' |
		    sort -n | awk -v s="$s" -v w="$w" -v n="$rounds" '
			{ v[NR] = $1; b = $2 }
			END { printf "%s %-6s median %.1f ns/hit (min %.1f, max %.1f, %d rounds), %d bytes\n",
			    s, w, v[int((NR + 1) / 2)], v[1], v[NR], NR, b }'
	done
done
