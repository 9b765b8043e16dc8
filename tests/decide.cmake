# SPDX-License-Identifier: MIT
# Decisions, cost and peeking (lib/decide.c): every field against reference
# models with an injected clock, and peeks that change no byte.
shmt_add_test(test_decide SOURCES test_decide.c LABELS unit TIMEOUT 300)
# Many processes with the real clock, costs above one, rate mode, kill -9.
shmt_add_test(test_decide_mp SOURCES test_decide_mp.c LABELS stress TIMEOUT 120)
# shmt_wait with real time (short bounded windows), across processes, with
# kill -9 and a signal.
shmt_add_test(test_wait SOURCES test_wait.c LABELS stress TIMEOUT 120)
