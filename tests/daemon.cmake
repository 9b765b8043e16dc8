# SPDX-License-Identifier: MIT
# Tests of shmthrottled: its config reader (unit) and the daemon binary
# itself, started, reloaded, stopped and killed in temporary segments.
if(TARGET shmt_config)
  shmt_add_test(test_daemon_config
    SOURCES test_daemon_config.c
    LIBS shmt_config
    ARGS ${PROJECT_SOURCE_DIR}/daemon/shmthrottled.conf.example
    LABELS unit TIMEOUT 60)
endif()

if(TARGET shmtd_core)
  shmt_add_test(test_daemon_snapshot
    SOURCES test_daemon_snapshot.c
    LIBS shmtd_core
    LABELS unit TIMEOUT 120)
endif()

if(TARGET shmthrottled)
  # One binary, two tiers: the kill -9 test is `stress`, the rest `unit`.
  shmt_add_test(test_daemon
    SOURCES test_daemon.c
    ARGS $<TARGET_FILE:shmthrottled> unit
    LABELS unit TIMEOUT 120)
  add_dependencies(test_daemon shmthrottled)
  if(TARGET shmthrottle)
    # The commands the daemon's log advises are run as written.
    target_compile_definitions(test_daemon PRIVATE
      SHMT_CLI_PATH="$<TARGET_FILE:shmthrottle>")
    add_dependencies(test_daemon shmthrottle)
  endif()
  # Upgrades: the daemon started on the snapshot or segment of ABI 6, 7 or 8.
  shmt_add_test(test_daemon_migrate
    SOURCES test_daemon_migrate.c
    ARGS $<TARGET_FILE:shmthrottled>
    LABELS unit TIMEOUT 120)
  target_compile_definitions(test_daemon_migrate PRIVATE
    SHMT_TEST_DATA="${PROJECT_SOURCE_DIR}/tests/data")
  add_dependencies(test_daemon_migrate shmthrottled)
  # 77: a time namespace was needed and unshare(1) could not make one.
  set_tests_properties(test_daemon_migrate PROPERTIES SKIP_RETURN_CODE 77)
  add_test(NAME test_daemon_kill9
    COMMAND test_daemon $<TARGET_FILE:shmthrottled> stress)
  set_tests_properties(test_daemon_kill9 PROPERTIES LABELS stress TIMEOUT 120)
endif()
