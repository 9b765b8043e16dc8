# SPDX-License-Identifier: MIT
# A per-client limiter defined anew by a move (lib/redefine.c): uses in
# flight carried, windows held, clients and overrides kept, refusals.
shmt_add_test(test_redefine SOURCES test_redefine.c LABELS unit TIMEOUT 120)
