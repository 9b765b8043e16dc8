# SPDX-License-Identifier: MIT
# Tests of the throttle (lib/limiter.c and its modes' files): the seed's model call for call, the
# bucket bound, bad input, per-client limiters, many processes, kill -9, and
# the protocol model-checked with spin (tests/model/throttle.pml).
set(SHMT_TL_UTIL ${CMAKE_CURRENT_SOURCE_DIR}/test_limiter_util.c)

shmt_add_test(test_limiter_model SOURCES test_limiter_model.c ${SHMT_TL_UTIL}
  LABELS unit TIMEOUT 300)
shmt_add_test(test_limiter_bound SOURCES test_limiter_bound.c ${SHMT_TL_UTIL}
  LABELS unit TIMEOUT 60)
shmt_add_test(test_limiter_badinput SOURCES test_limiter_badinput.c
  LABELS unit TIMEOUT 60)
shmt_add_test(test_limiter_client SOURCES test_limiter_client.c ${SHMT_TL_UTIL}
  LABELS unit TIMEOUT 120)
shmt_add_test(test_limiter_interleave SOURCES test_limiter_interleave.c ${SHMT_TL_UTIL}
  LABELS unit TIMEOUT 60)

# Changing a limiter in place: against a model with the injected clock, and
# four processes granting with the real clock while the parent changes it.
shmt_add_test(test_limiter_update SOURCES test_limiter_update.c ${SHMT_TL_UTIL}
  LABELS unit TIMEOUT 120 LIBS Threads::Threads)
shmt_add_test(test_limiter_update_mp SOURCES test_limiter_update.c ${SHMT_TL_UTIL}
  LABELS stress TIMEOUT 120 ARGS stress LIBS Threads::Threads)
# Rate mode's count of grants in its state word: bounds, refunds, changes,
# resets, the checker, and forked granters killed with SIGKILL.
shmt_add_test(test_gcra_count SOURCES test_gcra_count.c LABELS unit
  TIMEOUT 60)
# Rate and exact mode changed in place: models and promises with the
# injected clock; four processes on a clock shared through memory while the
# parent changes the parameters; kill -9 of a process changing them.
shmt_add_test(test_limiter_update_modes SOURCES test_limiter_update_modes.c
  ${SHMT_TL_UTIL} LABELS unit single-thread TIMEOUT 120)
shmt_add_test(test_limiter_update_modes_mp SOURCES test_limiter_update_modes.c
  ${SHMT_TL_UTIL} LABELS stress TIMEOUT 180 ARGS stress)

# The hand-off word of a contended limiter (lib/ring.c, "Contention"): taken,
# withdrawn, and two processes granting exactly the limit through it.
shmt_add_test(test_limiter_handoff SOURCES test_limiter_handoff.c LABELS unit
  TIMEOUT 120)

# Many processes and kill -9 with the real clock (a 20 ms window).
shmt_add_test(test_limiter_mp SOURCES test_limiter_mp.c ${SHMT_TL_UTIL}
  LABELS stress TIMEOUT 120 LIBS Threads::Threads)
# Key names of an exact limiter under six granting processes (2 ms window).
shmt_add_test(test_limiter_keys_mp SOURCES test_limiter_keys_mp.c ${SHMT_TL_UTIL}
  LABELS stress TIMEOUT 120)
shmt_add_test(test_limiter_kill SOURCES test_limiter_kill.c ${SHMT_TL_UTIL}
  LABELS stress TIMEOUT 120)

# The protocol model-checked (tests/model/throttle.pml).  The model does not run
# library code, so the sanitizer builds skip it; a machine without spin or cc
# fails these tests rather than skipping them.
if(NOT SHMT_SANITIZE)
  foreach(set safety broken account)
    add_test(NAME test_limiter_spin_${set}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/model/spin_throttle.sh
              ${CMAKE_CURRENT_SOURCE_DIR}/model/throttle.pml ${set})
    # About a minute alone on 2 cores; the bound leaves room for a loaded
    # machine, where the search is CPU-bound and slows in proportion.
    set_tests_properties(test_limiter_spin_${set} PROPERTIES
      LABELS unit TIMEOUT 900)
  endforeach()
endif()
# Resolved limiters: the same answers as the named calls, deletion, removal,
# threads and a forked child.
shmt_add_test(test_limiter_handle SOURCES test_limiter_handle.c LABELS unit
  TIMEOUT 120 LIBS Threads::Threads)
# Per-client overrides (shmt_client_set): semantics, move, snapshot, damage.
shmt_add_test(test_overrides SOURCES test_overrides.c
  LABELS unit single-thread TIMEOUT 60)
shmt_add_test(test_overrides_mp SOURCES test_overrides_mp.c
  LABELS stress TIMEOUT 300)
# Denials at the limit (their reasons, a word changed by another process
# since this thread's last one), named and resolved.
shmt_add_test(test_limiter_deny SOURCES test_limiter_deny.c LABELS unit
  TIMEOUT 60)
