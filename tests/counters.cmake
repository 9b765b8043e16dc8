# SPDX-License-Identifier: MIT
# Tests of the windowed counters (lib/counters.c) across processes: writers
# on the same keys lose no hit, and kill -9 of writers leaves every count
# within its bound.  (The model tests of shmt_hit and shmt_count are in
# test_hit, dict.cmake.)
shmt_add_test(test_count_mp SOURCES test_count_mp.c LABELS stress TIMEOUT 600)
