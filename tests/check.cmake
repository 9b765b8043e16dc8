# SPDX-License-Identifier: MIT
# shmt_check: each kind of damage it covers, written into a real segment,
# is named, and a check without SHMT_CHECK_REPAIR changes no byte
# (test_check).
shmt_add_test(test_check SOURCES test_check.c LABELS unit TIMEOUT 60)
