# SPDX-License-Identifier: MIT
# Tests of the throttle (lib/limiter.c): the seed's model call for call, the
# bucket bound, bad input, per-client limiters, many processes, kill -9, and
# the protocol model-checked with spin (lib/throttle.pml).
set(SHMT_TL_UTIL ${CMAKE_CURRENT_SOURCE_DIR}/test_limiter_util.c)

shmt_add_test(test_limiter_model SOURCES test_limiter_model.c ${SHMT_TL_UTIL}
  LABELS unit TIMEOUT 300)
