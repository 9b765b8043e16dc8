#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh MODE TARGET WORKDIR CORPUSDIR [LIBFUZZER-OPTION...]: run one fuzz
# target on its corpus: every input in CORPUSDIR (the seeds) and in
# CORPUSDIR/crashes-fixed (inputs that once failed) is replayed first, then
#   gate     mutations from a fixed seed, a fixed number of runs:
#            -seed=$SHMT_FUZZ_SEED (default 1) -runs=$SHMT_FUZZ_RUNS (set by
#            the ctest, per target), with address randomization off where
#            setarch allows it (compared pointers feed the mutator).  Nothing
#            depends on a time limit or on earlier runs (new inputs go to a
#            fresh WORKDIR/corpus).  Targets whose code sees only the input
#            (fuzz_config, fuzz_units) then run the very same inputs every
#            time; the others also see pids in segment names and real clocks,
#            so their mutations may drift a little from run to run.
#   explore  mutations from a random seed (printed by libFuzzer as
#            "Seed: N"; replay with -seed=N) for $SHMT_FUZZ_SECONDS
#            (default 300) seconds.  Interesting inputs collect in
#            WORKDIR/corpus and stay there across runs.
# A crash goes to WORKDIR/crash-* (leak-*, timeout-*, oom-*); keep it as
# CORPUSDIR/crashes-fixed/<what-it-is> once it is fixed.  The exit status is
# the target's (non-zero on any crash, leak, sanitizer report or input slower
# than -timeout).  Segments and files the target leaves behind (names carry
# its pid) are removed either way.
set -uo pipefail
mode=$1 target=$2 work=$3 seeds=$4
shift 4
norand=()
case $mode in
gate)
  rm -rf "$work/corpus"
  mkdir -p "$work/corpus"
  opts=(-seed="${SHMT_FUZZ_SEED:-1}" -runs="${SHMT_FUZZ_RUNS:?SHMT_FUZZ_RUNS not set}"
        -timeout=60)
  if setarch -R true 2>/dev/null; then norand=(setarch -R); fi
  ;;
explore)
  mkdir -p "$work/corpus"
  opts=(-max_total_time="${SHMT_FUZZ_SECONDS:-300}" -timeout=10)
  ;;
*)
  echo "run.sh: mode must be gate or explore, not '$mode'" >&2
  exit 2
  ;;
esac
dirs=("$work/corpus" "$seeds")
if [ -d "$seeds/crashes-fixed" ]; then dirs+=("$seeds/crashes-fixed"); fi
${norand[@]+"${norand[@]}"} "$target" "${opts[@]}" -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$work/" "$@" "${dirs[@]}" &
pid=$!
wait $pid
rc=$?
rm -f /dev/shm/shmt-fuzz-"$pid"-* /tmp/shmt-fuzz-"$pid"[-.]*
if [ $rc -ne 0 ]; then
  echo "run.sh: $(basename "$target") failed ($rc); the input is in $work/"
  ls "$work" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' || true
fi
exit $rc
