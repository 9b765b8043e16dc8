# SPDX-License-Identifier: MIT
# Tests of the segment: life cycle, refusals, concurrent creation, the
# installed package, and the public header compiled on its own.
shmt_add_test(test_segment SOURCES test_segment.c LABELS unit TIMEOUT 60)
shmt_add_test(test_segment_race SOURCES test_segment_race.c LABELS stress TIMEOUT 300)
