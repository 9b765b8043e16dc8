#!/usr/bin/env bash
# Installs what is missing, builds the normal, ASan+UBSan and TSan
# configurations, and runs the whole suite of each through ctest.
# Labels: unit and stress run here; `soak` only by hand (ctest -L soak).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

jobs=$(nproc)
werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi

run_preset() {
  local preset=$1; shift
  echo "=== $preset: configure and build"
  cmake --preset "$preset" -DSHMT_WERROR=$werror >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  echo "=== $preset: ctest"
  local dir=build
  if [ "$preset" != default ]; then dir=build-$preset; fi
  ( cd "$dir" && env "$@" ctest --output-on-failure -j "$jobs" -LE soak --timeout 600 )
}

run_preset default
# Sanitizer builds run the same tests; stress loops are scaled down because
# instrumented code runs several times slower on the same 2 cores.
run_preset asan SHMT_STRESS_SCALE=0.25 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_preset tsan SHMT_STRESS_SCALE=0.2 \
  TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1"
echo "=== all configurations passed"
