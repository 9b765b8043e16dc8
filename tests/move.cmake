# SPDX-License-Identifier: MIT
# Segment generations: a segment moved into a bigger one under running
# workers (lib/move.c); kill -9 of the mover at seeded random points.
shmt_add_test(test_move SOURCES test_move.c LABELS unit TIMEOUT 120)
add_test(NAME test_move_kill COMMAND test_move stress)
set_tests_properties(test_move_kill PROPERTIES LABELS stress TIMEOUT 600)
# Who owns the next generation: the old object's owner, group and mode,
# whoever moves it (run as root; skipped otherwise).
shmt_add_test(test_move_owner SOURCES test_move_owner.c LABELS unit TIMEOUT 120)
# The mappings of followed generations unmapped after a grace period
# (lib/rcu.c): a parked reader, moves in a row, fork, idle threads.
shmt_add_test(test_reclaim SOURCES test_reclaim.c LABELS unit TIMEOUT 120)
