# SPDX-License-Identifier: MIT
# Segment generations: a segment moved into a bigger one under running
# workers (lib/move.c); kill -9 of the mover at seeded random points.
shmt_add_test(test_move SOURCES test_move.c LABELS unit TIMEOUT 120)
add_test(NAME test_move_kill COMMAND test_move stress)
set_tests_properties(test_move_kill PROPERTIES LABELS stress TIMEOUT 600)
# The mappings of followed generations unmapped after a grace period
# (lib/rcu.c): a parked reader, moves in a row, fork, idle threads.
shmt_add_test(test_reclaim SOURCES test_reclaim.c LABELS unit TIMEOUT 120)
