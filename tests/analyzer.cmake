# SPDX-License-Identifier: MIT
# Tests of the hot-key analyzer (lib/analyzer.c) against an exact oracle:
# the seed's scenario families and adversarial traces on several
# configurations, fixed memory after ten million distinct keys, per-client
# feeding, and forked writers killed with SIGKILL mid-stream.
add_library(shmt_analyzer_util STATIC test_analyzer_util.c)
target_link_libraries(shmt_analyzer_util PUBLIC shmt_testutil)
shmt_add_test(test_analyzer_seed SOURCES test_analyzer_seed.c
  LIBS shmt_analyzer_util LABELS unit single-thread TIMEOUT 300)
shmt_add_test(test_analyzer_adv SOURCES test_analyzer_adv.c
  LIBS shmt_analyzer_util LABELS unit single-thread TIMEOUT 300)
shmt_add_test(test_analyzer_mem SOURCES test_analyzer_mem.c
  LIBS shmt_analyzer_util LABELS unit TIMEOUT 300)
# The crossing records, white-box: thinned logs, a killed writer's stripe,
# hostile logs.
shmt_add_test(test_analyzer_recs SOURCES test_analyzer_recs.c
  LIBS shmt_analyzer_util LABELS unit TIMEOUT 300)
shmt_add_test(test_analyzer_kill SOURCES test_analyzer_kill.c
  LIBS shmt_analyzer_util LABELS stress TIMEOUT 600)
shmt_add_test(test_analyzer_live SOURCES test_analyzer_live.c
  LIBS shmt_analyzer_util LABELS stress TIMEOUT 300)
# Every sub-window edge and one nanosecond either side, with windows the
# sub-window count does not divide.
shmt_add_test(test_analyzer_edges SOURCES test_analyzer_edges.c
  LIBS shmt_analyzer_util LABELS unit single-thread TIMEOUT 300)
# Traces aimed with the secret known: filled groups, the oldest sub-window,
# edge bursts, a moving hot key; every answer must be certified.
shmt_add_test(test_analyzer_exact SOURCES test_analyzer_exact.c
  LIBS shmt_analyzer_util LABELS unit single-thread TIMEOUT 300)
# The exact window: bursts of 99 to 1000 times a minute's traffic at every
# slice of the oldest sub-window, a hot key gone, moving hot keys, a million
# distinct keys; every answer complete and its listed keys near the
# threshold of the exact window.
shmt_add_test(test_analyzer_window SOURCES test_analyzer_window.c
  LIBS shmt_analyzer_util LABELS stress single-thread TIMEOUT 600)
# The oldest sub-window's corner: a key heavy before the exact window and
# requested again inside it, counted and held to its stated bound; a key
# whose requests end the oldest sub-window, never listed for them.
shmt_add_test(test_analyzer_oldest SOURCES test_analyzer_oldest.c
  LIBS shmt_analyzer_util LABELS unit single-thread TIMEOUT 300)
# Forked writers, each with a stripe of its own, and this process querying:
# every answer against the exact log of the writers' requests.
shmt_add_test(test_analyzer_mp SOURCES test_analyzer_mp.c
  LIBS shmt_analyzer_util LABELS unit TIMEOUT 300)
# The system's clocks: a get counted at the coarse clock, never ahead of
# it, and every earlier get inside a query's exact window.
shmt_add_test(test_analyzer_clock SOURCES test_analyzer_clock.c
  LIBS shmt_analyzer_util LABELS unit single-thread TIMEOUT 300)
# The portable copy of the request path (where the processor has AVX2, the
# tests above run the copy compiled for it; see shmt__an_feed).  Each copy
# has its original's labels: one of a single-threaded test is too (the
# ThreadSanitizer stage leaves those out: one thread has no race to find).
foreach(t exact edges oldest seed mp)
  add_test(NAME test_analyzer_${t}_sse2 COMMAND test_analyzer_${t})
  get_test_property(test_analyzer_${t} LABELS labels)
  set_tests_properties(test_analyzer_${t}_sse2 PROPERTIES
    ENVIRONMENT "SHMT_ANALYZER_SSE2=1" LABELS "${labels}" TIMEOUT 300)
endforeach()
# The name table under collisions (keys chosen with the secret known): a
# hot key keeps its name against colder keys in both its places.
shmt_add_test(test_analyzer_names SOURCES test_analyzer_names.c
  LIBS shmt_analyzer_util LABELS unit single-thread TIMEOUT 60)
