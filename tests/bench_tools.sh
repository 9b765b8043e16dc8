#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The bench's tools around bench/run: bench/pack makes a bundle whose
# programs run on their packed libraries alone; bench/run --counts, --host,
# --no-plot and --raw write a report with its HOST line and scaling table;
# --replot draws the plot from that log; bad arguments are refused.
# Usage: bench_tools.sh SOURCE_DIR BENCH_BINARY
set -euo pipefail

src=$1
bench=$2
tmp=$(mktemp -d /tmp/shmt-benchtools-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "bench_tools: FAIL: $*" >&2; exit 1; }

# The bundle: wrappers, libraries, and programs that run from it.
bash "$src/bench/pack" --bench "$bench" "$tmp/pack" 2>"$tmp/pack.err" || fail "bench/pack: $(cat "$tmp/pack.err")"
for p in shmthrottle-bench shmthrottle-ancost shmthrottle-grantpair shmthrottle-layoutfloor redis-server; do
  [ -x "$tmp/pack/bin/$p" ] || fail "no $p in the bundle"
  [ -x "$tmp/pack/libexec/$p" ] || fail "no program $p in the bundle"
done
ls "$tmp/pack/lib" | grep -q '^libhiredis' || fail "the bundle lacks libhiredis"
ls "$tmp/pack/lib" | grep -Eq '^(libc|libm|libpthread|ld-linux)[.-]' && fail "the bundle carries glibc's own libraries"
# The packed bench, found through the bundle's env, lists its systems and
# runs one short point with its own redis-server (found on PATH).
(. "$tmp/pack/env" && command -v shmthrottle-bench) | grep -q "^$tmp/pack/bin/" || fail "env does not put the bundle first"
out=$(. "$tmp/pack/env" && shmthrottle-bench --no-progress --no-clock --no-floor -s shmt,redis \
  -W throttle-same -p 1 -d 0.05 -w 0.01) || fail "the packed bench failed"
[ "$(grep -c '^SUMMARY' <<<"$out")" = 2 ] || fail "the packed bench did not report 2 systems: $out"

# A run with a worker count of its own, a host name, no plot and the raw log.
bash "$src/bench/run" --smoke --counts "2 1" --host tools-test --no-plot --raw "$tmp/raw.log" \
  --bench "$tmp/pack/bin/shmthrottle-bench" --out "$tmp/out" 2>"$tmp/run.err" || fail "bench/run: $(tail -5 "$tmp/run.err")"
md=$(ls "$tmp/out"/*-tools-test-smoke.md) || fail "no report named after the host"
log=${md%.md}.log
[ -s "$log" ] || fail "no log beside the report"
[ ! -e "${md%.md}.png" ] || fail "--no-plot drew a plot"
grep -q '^HOST name=tools-test .*counts=2,1$' "$log" || fail "the log lacks its HOST line"
grep -q '^## Scaling' "$md" || fail "the report lacks the scaling table"
grep -q '^| workload | mode | profile | workers as | system | 1 | 2 |$' "$md" || fail "the scaling table is not of the counts asked for"
grep -Eq '^\| throttle-distinct \| buckets \| grant \| procs \| shmt \| [0-9.]+[Mk] \(1\.00\) \| [0-9.]+[Mk] \([0-9.]+\) \|$' "$md" ||
  fail "the scaling table lacks the library's row of two limiters"
# The targets' round (one in a smoke run): its lines in the log, and the
# verdicts on the rounds, each round's ratio beside the median.
[ "$(grep -c '^TG 1 ' "$log")" -ge 9 ] || fail "the log lacks the targets' round"
grep -Eq '^\| 2 processes on 1 limiter / 1 process alone \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| >= 0.9 \| (met|NOT met) \|$' "$md" ||
  fail "the targets table lacks the verdict of a round"
# The analyzer's target from paired blocks (shmthrottle-ancost, packed
# beside the bench): its lines in the log, its verdict row in the report.
grep -Eq '^AC SUMMARY gets=[0-9]+ rounds=1 keys=[0-9]+ block=[0-9]+ pairs=[0-9]+ .*added_ns=-?[0-9.]+ .*an_bytes=1048576$' "$log" ||
  fail "the log lacks the analyzer's paired measure"
[ "$(grep -c '^AC ROUND ' "$log")" = 1 ] || fail "the log lacks the paired measure's round"
grep -Eq '^\| what the analyzer adds to a get: [0-9]+ paired blocks .*\| -?[0-9.]+ ns \| -?[0-9.]+ \| <= 20 ns \| (met|NOT met) \|$' "$md" ||
  fail "the report lacks the analyzer's verdict from paired blocks"
grep -q '^| the analyzer'"'"'s memory (fixed at creation, whatever the keys: [0-9]* here) | 1.00 MiB |' "$md" ||
  fail "the report lacks the analyzer's memory"
# The grant's short turns (shmthrottle-grantpair, packed beside the bench):
# both modes in the log, and verdict rows (a smoke run has 61 turns: the
# quiet ones may be too few for a verdict, which says so).
for m in buckets gcra; do
  grep -Eq "^GP mode=$m ops=[0-9]+ turns=61 .*named_ratio=[0-9.]+ .*quiet=[0-9]+ named_quiet=[0-9.]+ resolved_quiet=[0-9.]+\$" "$log" ||
    fail "the log lacks the grant's short turns in $m mode"
done
grep -Eq '^\| named grant / \(clock read \+ 16-byte CAS\), [0-9]+ calls a block \| [0-9.]+ \([0-9.]+-[0-9.]+\) \| [0-9.]+ \| [0-9]+ of 61 \| <= 1.35 \| (met|NOT met|not measured) \|$' "$md" ||
  fail "the report lacks the grant's verdict from short turns"
# The dictionary's floor (shmthrottle-layoutfloor, packed beside the
# bench): its lines in the log, its rows in the report.
grep -Eq '^LF SUMMARY keys=100000 ops=[0-9]+ rounds=1 draw_ns=[0-9.]+ peer_ns=[0-9.]+ chain_ns=[0-9.]+ inline_ns=[0-9.]+ chain_ratio=[0-9.]+ inline_ratio=[0-9.]+ ' "$log" ||
  fail "the log lacks the dictionary's floor"
[ "$(grep -c '^LF ROUND ' "$log")" = 1 ] || fail "the log lacks the floor's round"
grep -Eq '^\| library: the bucket'"'"'s slot, else the bucket then the item \(100000 keys, [0-9]+ buckets, [0-9]+ in slots\) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$' "$md" ||
  fail "the report lacks the library layout's floor"
grep -Eq '^\| mutex peer: the key.s slot \| [0-9.]+ \| [0-9.]+ \| 1 \|$' "$md" || fail "the report lacks the peer layout's floor"
cmp -s <(grep -E '^(HOST|CLOCK|SUMMARY|RATIO|AN|TG|GC|AC|GP|LF) ' "$tmp/raw.log") "$log" || fail "the raw log and the report's log differ"

# The plot, drawn later from the log alone.
if command -v gnuplot >/dev/null; then
  bash "$src/bench/run" --replot "$log" 2>"$tmp/replot.err" || fail "--replot: $(cat "$tmp/replot.err")"
  [ -s "${md%.md}.png" ] || fail "--replot wrote no plot"
else
  echo "bench_tools: gnuplot not installed: --replot not checked"
fi

# Refusals: a worker count of 0, a raw log that exists, a host name with a
# slash, a replot of nothing.
for bad in "--counts 0" "--counts x" "--raw $tmp/raw.log" "--host a/b" "--replot $tmp/none.log"; do
  # shellcheck disable=SC2086
  if bash "$src/bench/run" --smoke --bench "$tmp/pack/bin/shmthrottle-bench" --out "$tmp/bad" $bad >/dev/null 2>"$tmp/bad.err"; then
    fail "bench/run accepted $bad"
  fi
  grep -q '^bench/run: ' "$tmp/bad.err" || fail "bench/run $bad failed without saying why"
done
[ ! -e "$tmp/bad" ] || fail "a refused run wrote a report"
echo "bench_tools: ok"
