# SPDX-License-Identifier: MIT
# The segment's secret (lib/hash.h): one per segment, taken once per handle,
# and ids or keys aimed at one place of one segment scatter in another.
shmt_add_test(test_hash SOURCES test_hash.c
  LIBS shmt_analyzer_util LABELS unit TIMEOUT 120)
# The keyed hash itself: SipHash-2-4 bit for bit against libsodium, and
# SipHash-1-3 against CPython's values (the vectors are in the file).
shmt_add_test(test_siphash SOURCES test_siphash.c LIBS PkgConfig::SODIUM
  LABELS unit TIMEOUT 60)
