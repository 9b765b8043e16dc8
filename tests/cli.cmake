# SPDX-License-Identifier: MIT
# The shmthrottle CLI, run as a real process: golden output and JSON of each
# command, errors and exit codes (test_cli), the live view under a
# pseudo-terminal (test_cli_watch), and the number formats and byte helpers
# (test_cli_fmt).
if(TARGET shmthrottle)
  pkg_check_modules(CLI_JANSSON REQUIRED IMPORTED_TARGET jansson)
  shmt_add_test(test_cli SOURCES test_cli.c test_cli_util.c
    LIBS PkgConfig::CLI_JANSSON
    ARGS $<TARGET_FILE:shmthrottle> ${CMAKE_CURRENT_SOURCE_DIR}/cli)
  add_dependencies(test_cli shmthrottle)
  # `client set|clear|list`: per-client overrides from the command line
  # and from a config's override lines (create -c).
  shmt_add_test(test_cli_client SOURCES test_cli_client.c test_cli_util.c
    LABELS unit LIBS PkgConfig::CLI_JANSSON ARGS $<TARGET_FILE:shmthrottle>)
  add_dependencies(test_cli_client shmthrottle)
  shmt_add_test(test_cli_watch SOURCES test_cli_watch.c test_cli_util.c
    ARGS $<TARGET_FILE:shmthrottle>)
  add_dependencies(test_cli_watch shmthrottle)
  shmt_add_test(test_cli_fmt SOURCES test_cli_fmt.c ${PROJECT_SOURCE_DIR}/cli/fmt.c
    ${PROJECT_SOURCE_DIR}/cli/bytes.c)
  target_include_directories(test_cli_fmt PRIVATE ${PROJECT_SOURCE_DIR}/cli)
  target_link_libraries(test_cli_fmt PRIVATE shmt_units)
endif()
