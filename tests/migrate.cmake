# SPDX-License-Identifier: MIT
# Upgrades (lib/migrate.c): the snapshot of an ABI 6 segment in tests/data,
# migrated and checked item by item, and seeded damage to it refused.
shmt_add_test(test_migrate SOURCES test_migrate.c LABELS unit TIMEOUT 120)
target_compile_definitions(test_migrate PRIVATE
  SHMT_TEST_DATA="${PROJECT_SOURCE_DIR}/tests/data")
