# SPDX-License-Identifier: MIT
# Tests of the windowed counters (lib/counters.c).  test_hit: shmt_hit and
# shmt_count against the exact log of every hit on an injected clock (random
# traces over days, bursts in the oldest part of the window, silences, keys
# hit once a day, a million hits a second, window edges), the memory
# formula, eviction by last hit.  test_count_mp: writers on the same keys
# lose no hit, and kill -9 of writers, on a frozen and on a moving clock,
# leaves every count within its bound.
shmt_add_test(test_hit SOURCES test_hit.c LABELS unit single-thread TIMEOUT 300)
shmt_add_test(test_count_mp SOURCES test_count_mp.c LABELS stress TIMEOUT 600)
# test_counters_hostile: counters in a segment another process damages: a
# ring word changed by a forked process while a hit runs; shard walks over
# chains that all link to one looping item (one budget per shard: the
# snapshot is refused, housekeeping stops and says so, eviction stops); a
# header that contradicts its buckets (named by the check, refused by a
# restore); a hit that only shrinks a block (no other key evicted).
shmt_add_test(test_counters_hostile SOURCES test_counters_hostile.c LABELS unit TIMEOUT 120)
