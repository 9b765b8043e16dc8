#!/usr/bin/env bash
# Installs what is missing, builds the normal, ASan+UBSan and TSan
# configurations, and runs the whole suite of each through ctest.
# Labels: unit and stress run here, and fuzz (fixed seeds) in the clang
# build; `soak` and `fuzz-explore` only by hand (ctest -L soak).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

jobs=$(nproc)
werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi

# run_preset PRESET EXCLUDE VAR=VALUE...: build PRESET, run its ctest
# without the labels matching EXCLUDE, with the environment given.
run_preset() {
  local preset=$1 exclude=$2; shift 2
  echo "=== $preset: configure and build"
  cmake --preset "$preset" -DSHMT_WERROR=$werror >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  echo "=== $preset: ctest -LE '$exclude'"
  local dir=build
  if [ "$preset" != default ]; then dir=build-$preset; fi
  ( cd "$dir" && env "$@" ctest --output-on-failure -j "$jobs" -LE "$exclude" --timeout 600 )
}

run_preset default soak
# Sanitizer builds run the same tests; stress loops are scaled down because
# instrumented code runs several times slower on the same 2 cores.
run_preset asan soak SHMT_STRESS_SCALE=0.25 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# ThreadSanitizer finds races between threads: the tests labelled
# single-thread (one thread, no child process: the analyzer's, the
# dictionary's and the counters' models) have none to find, and run
# here 5-15 times slower; the normal and ASan builds run them.
run_preset tsan 'soak|single-thread' SHMT_STRESS_SCALE=0.2 \
  TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1"
# libFuzzer targets (tests/fuzz/), built with clang: each replays its whole
# corpus (tests/fuzz/corpus/<target>/ and its crashes-fixed/), then runs a
# fixed number of mutations from a fixed seed, so the verdict depends on the
# code alone; a crash, a leak or a sanitizer report fails the stage.
# Exploratory fuzzing (random seeds, minutes per target) is the label
# fuzz-explore, run by hand (see README, Tests).
echo "=== fuzz: configure and build (clang, libFuzzer)"
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=Debug -DSHMT_FUZZ=ON -DSHMT_BUILD_BENCH=OFF -DSHMT_WERROR=OFF >/dev/null
cmake --build build-fuzz -j "$jobs" --target shmt_fuzz
echo "=== fuzz: ctest -L '^fuzz$' (corpus, then fixed-seed mutations)"
( cd build-fuzz && ctest --output-on-failure -j "$jobs" -L '^fuzz$' --timeout 900 )
echo "=== all configurations passed"
