# SPDX-License-Identifier: MIT
# shmt_check: each kind of damage it covers, written into a real segment,
# is named, and a check without SHMT_CHECK_REPAIR changes no byte
# (test_check).
shmt_add_test(test_check SOURCES test_check.c LABELS unit TIMEOUT 60)
# The read-only check beside forked writers on the real clock: it names
# planted damage and never a write in progress (test_check_mp).
shmt_add_test(test_check_mp SOURCES test_check_mp.c LABELS stress TIMEOUT 120)

# The CLI's check prints the library's findings, kind by kind, with the
# documented exit codes, and repairs only with --repair (test_cli_check).
if(TARGET shmthrottle)
  pkg_check_modules(CHECK_JANSSON REQUIRED IMPORTED_TARGET jansson)
  shmt_add_test(test_cli_check SOURCES test_cli_check.c test_cli_util.c
    LABELS unit LIBS PkgConfig::CHECK_JANSSON ARGS $<TARGET_FILE:shmthrottle>)
  add_dependencies(test_cli_check shmthrottle)
endif()
