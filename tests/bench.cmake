# SPDX-License-Identifier: MIT
# The bench's smoke run: every workload and system once, briefly, so the
# bench keeps building and working.  It asserts nothing about speed.  The
# sanitizer presets do not build the bench, and then there is no test.
if(TARGET shmthrottle-bench)
  add_test(NAME bench_smoke
    COMMAND ${PROJECT_SOURCE_DIR}/bench/run --smoke
            --bench $<TARGET_FILE:shmthrottle-bench>
            --out ${CMAKE_CURRENT_BINARY_DIR}/bench-smoke)
  set_tests_properties(bench_smoke PROPERTIES LABELS unit TIMEOUT 120)

  # bench/pack's bundle, and bench/run's --counts, --host, --no-plot, --raw
  # and --replot, on a smoke run of two worker counts.
  add_test(NAME bench_tools
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_tools.sh ${PROJECT_SOURCE_DIR}
            $<TARGET_FILE:shmthrottle-bench>)
  set_tests_properties(bench_tools PROPERTIES LABELS unit TIMEOUT 180)

  # The mutex design's locks: one per limiter, robust (a holder killed
  # with kill -9 is taken over), and the one-lock variant as labelled.
  shmt_add_test(test_bench_mutex
    SOURCES ${PROJECT_SOURCE_DIR}/bench/test_bench_mutex.c
            ${PROJECT_SOURCE_DIR}/bench/sys_mutex.c
    LIBS shmthrottle_internal Threads::Threads TIMEOUT 60)
  target_include_directories(test_bench_mutex PRIVATE ${PROJECT_SOURCE_DIR}/bench)
endif()

# The bench's histogram and Zipf table, tested on their own: they build in
# every configuration, sanitizers included.
shmt_add_test(test_bench_units
  SOURCES ${PROJECT_SOURCE_DIR}/bench/test_bench.c
          ${PROJECT_SOURCE_DIR}/bench/hist.c ${PROJECT_SOURCE_DIR}/bench/zipf.c
  LIBS m TIMEOUT 60)
target_include_directories(test_bench_units PRIVATE ${PROJECT_SOURCE_DIR}/bench)
