#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# repeat.sh [BUILD-DIR [CTEST-OPTION...]]: run the fuzz gate
# (`ctest -L '^fuzz$'`) three times in BUILD-DIR (default build-fuzz): twice
# in a row, then with -j2 (two targets side by side), and check that every
# target ran the very same inputs each time: libFuzzer's final figures
# (stat::number_of_executed_units, stat::new_units_added, and cov:, ft:,
# corp: of its last line) and the names (content hashes) of the inputs it
# added, which tests/fuzz/run.sh writes to tests/fuzz-work/<target>/stats,
# must be equal.  CTEST-OPTION goes to every run.  Exits 1 when a target
# differs or a run fails, 0 otherwise, and prints the figures.
set -uo pipefail
build=${1:-build-fuzz}
shift || true
work=$build/tests/fuzz-work
save=$(mktemp -d)
trap 'rm -rf "$save"' EXIT

for round in 1 2 3; do
  par=()
  if [ $round -eq 3 ]; then par=(-j2); fi
  echo "=== repeat.sh: run $round: ctest -L '^fuzz\$' ${par[*]} $*"
  rm -f "$work"/*/stats
  if ! (cd "$build" && ctest -L '^fuzz$' --output-on-failure ${par[@]+"${par[@]}"} "$@" \
      >"$save/ctest-$round.log" 2>&1); then
    cat "$save/ctest-$round.log"
    echo "repeat.sh: the gate failed in run $round" >&2
    exit 1
  fi
  mkdir -p "$save/$round"
  for f in "$work"/*/stats; do
    [ -e "$f" ] || continue
    cp "$f" "$save/$round/$(basename "$(dirname "$f")")"
  done
done

rc=0
n=0
for f in "$save"/1/*; do
  [ -e "$f" ] || continue
  t=$(basename "$f")
  n=$((n + 1))
  same=1
  for round in 2 3; do
    if ! cmp -s "$f" "$save/$round/$t"; then
      [ $same -eq 0 ] || echo "DIFFERENT $t:"
      echo "  run 1 / run $round:"
      diff "$f" "$save/$round/$t" | sed 's/^/    /'
      same=0
      rc=1
    fi
  done
  if [ $same -eq 1 ]; then
    echo "same      $t: $(grep -E '^stat::number_of_executed_units' "$f" | tr -s ' ' | cut -d' ' -f2) units," \
      "$(grep -E '^stat::new_units_added' "$f" | tr -s ' ' | cut -d' ' -f2) added, $(grep -E '^cov:' "$f")," \
      "$(grep -E '^added:' "$f" | cut -c1-19)"
  fi
done
if [ "$n" -eq 0 ]; then
  echo "repeat.sh: no target wrote $work/<target>/stats" >&2
  exit 1
fi
exit $rc
