# SPDX-License-Identifier: MIT
# Upgrades (lib/migrate.c): the snapshots and segments of ABI 6 and ABI 7 in
# tests/data, migrated and checked item by item, and seeded damage refused.
shmt_add_test(test_migrate SOURCES test_migrate.c LABELS unit TIMEOUT 120)
target_compile_definitions(test_migrate PRIVATE
  SHMT_TEST_DATA="${PROJECT_SOURCE_DIR}/tests/data")
