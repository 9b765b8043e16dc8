# SPDX-License-Identifier: MIT
# Operations: the daemon's metrics endpoint scraped over HTTP and the CLI's
# `stat --prometheus` beside it, the log's priorities, the library's
# version.
if(TARGET shmthrottled)
  shmt_add_test(test_daemon_log
    SOURCES test_daemon_log.c
    ARGS $<TARGET_FILE:shmthrottled>
    LIBS shmtd_core
    LABELS unit TIMEOUT 60)
  add_dependencies(test_daemon_log shmthrottled)

  find_program(SHMT_CURL curl)
  find_program(SHMT_PROMTOOL promtool)
  if(SHMT_CURL)
    set(_promtool "")
    if(SHMT_PROMTOOL)
      set(_promtool ${SHMT_PROMTOOL})
    else()
      message(STATUS "promtool not found: test_daemon_metrics checks the "
                     "exposition format with its own parser only")
    endif()
    shmt_add_test(test_daemon_metrics
      SOURCES test_daemon_metrics.c
      ARGS $<TARGET_FILE:shmthrottled> ${SHMT_CURL} ${_promtool}
      LIBS m
      LABELS unit TIMEOUT 120)
    add_dependencies(test_daemon_metrics shmthrottled)
    # The CLI's `stat --prometheus` against the endpoint: the same
    # families, checked by promtool when found.
    if(TARGET shmthrottle)
      find_program(SHMT_BASH bash REQUIRED)
      add_test(NAME test_cli_prom
        COMMAND ${SHMT_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_prom.sh
                $<TARGET_FILE:shmthrottle> $<TARGET_FILE:shmthrottled>
                ${SHMT_CURL} ${_promtool})
      set_tests_properties(test_cli_prom PROPERTIES LABELS unit TIMEOUT 60)
    endif()
  else()
    message(STATUS "curl not found: test_daemon_metrics is not built")
  endif()
endif()

shmt_add_test(test_version
  SOURCES test_version.c
  ARGS ${PROJECT_VERSION}
  LABELS unit TIMEOUT 30)

# The systemd unit and the default config, installed into a scratch prefix.
if(TARGET shmthrottled)
  find_program(SHMT_BASH bash REQUIRED)
  add_test(NAME test_unit
    COMMAND ${SHMT_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_unit.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(test_unit PROPERTIES LABELS unit TIMEOUT 120)
endif()

if(TARGET shmthrottle)
  find_program(SHMT_BASH bash REQUIRED)
  add_test(NAME test_cli_version
    COMMAND ${SHMT_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_version.sh
            $<TARGET_FILE:shmthrottle> ${PROJECT_VERSION})
  set_tests_properties(test_cli_version PROPERTIES LABELS unit TIMEOUT 30)
endif()

# The manual pages: `mandoc -T lint` clean (warnings fail; style notes,
# such as references to pages not installed on this machine, do not), and
# every exported function on a page.
find_program(SHMT_MANDOC mandoc)
if(SHMT_MANDOC)
  foreach(page ${SHMT_MAN_PAGES})
    add_test(NAME test_man_lint_${page}
      COMMAND ${SHMT_MANDOC} -T lint -W warning ${PROJECT_SOURCE_DIR}/man/${page})
    set_tests_properties(test_man_lint_${page} PROPERTIES LABELS unit TIMEOUT 30)
  endforeach()
  find_program(SHMT_BASH bash REQUIRED)
  add_test(NAME test_man_coverage
    COMMAND ${SHMT_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_man_coverage.sh ${PROJECT_SOURCE_DIR})
  set_tests_properties(test_man_coverage PROPERTIES LABELS unit TIMEOUT 30)
else()
  message(STATUS "mandoc not found: the manual pages are not linted")
endif()

# The Debian packages, built by cpack and unpacked into a scratch root.
# `stress`: it runs cpack over the whole build.
if(TARGET shmthrottled AND TARGET shmthrottle)
  find_program(SHMT_BASH bash REQUIRED)
  add_test(NAME test_packages
    COMMAND ${SHMT_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_packages.sh
            ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${PROJECT_VERSION})
  set_tests_properties(test_packages PROPERTIES LABELS stress TIMEOUT 600)
endif()

# The unit's hardening tried on the daemon: read-only file systems but
# /dev, /proc, /sys and the state directory, an unprivileged user, no
# capabilities, in a private mount namespace.  Skipped (77) without root.
if(TARGET shmthrottled AND TARGET shmthrottle)
  find_program(SHMT_BASH bash REQUIRED)
  add_test(NAME test_unit_sandbox
    COMMAND ${SHMT_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_unit_sandbox.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(test_unit_sandbox PROPERTIES LABELS unit TIMEOUT 120
    SKIP_RETURN_CODE 77)
endif()
