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
