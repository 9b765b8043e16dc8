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
#            fresh WORKDIR/corpus).  Every target then runs the very same
#            inputs every time: the fuzz build's library sees a fixed host
#            (lib/env.h: pid, clocks, random bytes, /proc) and the names it
#            makes are the same on every run (below).  The final figures go
#            to WORKDIR/stats, which tests/fuzz/repeat.sh compares.
#   explore  mutations from a random seed (printed by libFuzzer as
#            "Seed: N"; replay with -seed=N) for $SHMT_FUZZ_SECONDS
#            (default 300) seconds.  Interesting inputs collect in
#            WORKDIR/corpus and stay there across runs.
# A crash goes to WORKDIR/crash-* (leak-*, timeout-*, oom-*); keep it as
# CORPUSDIR/crashes-fixed/<what-it-is> once it is fixed.  The exit status is
# the target's (non-zero on any crash, leak, sanitizer report or input slower
# than -timeout).
#
# Names.  The target names its segments /shmt-fuzz-ID-* and its files
# /tmp/shmt-fuzz-ID[-.]*, with ID = SHMT_FUZZ_ID = <target>-<n> set here:
# n is a slot of this host, held by an exclusive lock for the whole run, so
# no two runs on the host ever share a name (other builds of the tree
# included), and whatever a run leaves behind is removed before and after
# it.  The gate always takes slot 0 (waiting for another gate run of the
# same target to end), so its names, and with them its inputs, are the
# same on every run; explore takes the first free slot from 1 on.
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
  slot=0
  ;;
explore)
  mkdir -p "$work/corpus"
  opts=(-max_total_time="${SHMT_FUZZ_SECONDS:-300}" -timeout=10)
  slot=1
  ;;
*)
  echo "run.sh: mode must be gate or explore, not '$mode'" >&2
  exit 2
  ;;
esac
name=$(basename "$target")

# Take slot $slot (gate: wait for it; explore: the next one when busy).  The
# lock file is removed by its holder before it lets go, so a waiter checks
# that the file it locked is still the one at the path, and tries again if
# not.
while :; do
  id=$name-$slot
  lock=/tmp/shmt-fuzz-lock.$id
  exec 9>>"$lock" || exit 2
  if [ "$mode" = gate ]; then
    flock 9 || exit 2
  elif ! flock -n 9; then
    exec 9>&-
    slot=$((slot + 1))
    continue
  fi
  if [ "$(stat -c %d:%i "$lock" 2>/dev/null)" = "$(stat -L -c %d:%i /proc/self/fd/9)" ]; then
    break
  fi
  exec 9>&-
done
clean() {
  rm -f /dev/shm/shmt-fuzz-"$id"-* /tmp/shmt-fuzz-"$id"[-.]*
}
clean

# The target starts from WORKDIR with the same arguments and environment
# wherever the tree is and whoever runs it: with address randomization off,
# their bytes decide where the stack lies, and addresses compared by the
# code feed the mutator.  The *_OPTIONS of the sanitizers and libFuzzer's
# own -reload (reread the corpus every second) and -purge_allocator_interval
# (free memory every second) would also make the run depend on time: they
# are off in the gate.
cd "$work" || exit 2
ln -sfn "$target" "$name"
ln -sfn "$seeds" seeds
dirs=(corpus seeds)
if [ -d "$seeds/crashes-fixed" ]; then dirs+=(seeds/crashes-fixed); fi
if [ "$mode" = gate ]; then opts+=(-reload=0 -purge_allocator_interval=-1); fi
fixedenv=(SHMT_FUZZ_ID="$id" PATH=/usr/bin:/bin)
for v in ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS ASAN_SYMBOLIZER_PATH; do
  if [ -n "${!v+x}" ]; then fixedenv+=("$v=${!v}"); fi
done
env -i "${fixedenv[@]}" ${norand[@]+"${norand[@]}"} "./$name" "${opts[@]}" -rss_limit_mb=4096 \
  -print_final_stats=1 -artifact_prefix=./ "$@" "${dirs[@]}" 2>&1 | tee log
rc=${PIPESTATUS[0]}
clean
rm -f "$lock"
exec 9>&-
if [ "$mode" = gate ]; then
  # The figures that must repeat: libFuzzer's count of inputs run and of
  # inputs added, its last coverage line, and the names (content hashes)
  # of the inputs it added.
  {
    grep -E '^stat::(number_of_executed_units|new_units_added):' "$work/log"
    grep -E '^#[0-9]+[[:space:]]+DONE ' "$work/log" | tail -n 1 |
      grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*'
    echo "added: $(ls "$work/corpus" | LC_ALL=C sort | sha1sum | cut -d' ' -f1)"
  } >"$work/stats"
fi
if [ $rc -ne 0 ]; then
  echo "run.sh: $(basename "$target") failed ($rc); the input is in $work/"
  ls "$work" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' || true
fi
exit $rc
