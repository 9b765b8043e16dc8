#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh TARGET WORKDIR SEEDDIR [LIBFUZZER-OPTION...]: run one fuzz target for $SHMT_FUZZ_SECONDS
# (default 15) from the seeds in SEEDDIR, after replaying every input kept in
# SEEDDIR/crashes-fixed.  New inputs go to WORKDIR/corpus, a crash to
# WORKDIR/crash-*; the exit status is the target's (non-zero on any crash,
# leak, sanitizer report or input slower than 10 s).  Segments and files the
# target leaves behind (names carry its pid) are removed either way.
set -uo pipefail
target=$1 work=$2 seeds=$3
shift 3
secs=${SHMT_FUZZ_SECONDS:-15}
mkdir -p "$work/corpus"
dirs=("$work/corpus" "$seeds")
if [ -d "$seeds/crashes-fixed" ]; then dirs+=("$seeds/crashes-fixed"); fi
"$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 \
  -print_final_stats=1 -artifact_prefix="$work/" "$@" "${dirs[@]}" &
pid=$!
wait $pid
rc=$?
rm -f /dev/shm/shmt-fuzz-"$pid"-* /tmp/shmt-fuzz-"$pid"[-.]*
if [ $rc -ne 0 ]; then
  echo "run.sh: $(basename "$target") failed ($rc); the input is in $work/"
  ls "$work" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' || true
fi
exit $rc
