# SPDX-License-Identifier: MIT
# Decisions, cost and peeking (lib/decide.inc): every field against reference
# models with an injected clock, and peeks that change no byte.
shmt_add_test(test_decide SOURCES test_decide.c LABELS unit TIMEOUT 300)
