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
endif()
