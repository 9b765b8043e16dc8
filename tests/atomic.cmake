# SPDX-License-Identifier: MIT
# The 16-byte load of shared words (lib/atomic128.h), atomic between forked
# processes on both of its paths; run again with $SHMT_ATOMIC16=cas, where
# the process must choose the locked load.
shmt_add_test(test_atomic128 SOURCES test_atomic128.c LABELS stress
  TIMEOUT 120)
add_test(NAME test_atomic128_cas COMMAND test_atomic128)
set_tests_properties(test_atomic128_cas PROPERTIES
  ENVIRONMENT "SHMT_ATOMIC16=cas" LABELS "stress" TIMEOUT 120)
