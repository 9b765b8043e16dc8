# SPDX-License-Identifier: MIT
# A per-client limiter defined anew by a move (lib/redefine.c): uses in
# flight carried, windows held, clients and overrides kept, refusals.
shmt_add_test(test_redefine SOURCES test_redefine.c LABELS unit TIMEOUT 120)
# `shmthrottle limiter set` on a per-client limiter: the move, run as a
# real process on a real segment, followed by a worker's handle.
if(TARGET shmthrottle)
  pkg_check_modules(RD_JANSSON REQUIRED IMPORTED_TARGET jansson)
  shmt_add_test(test_cli_redefine SOURCES test_cli_redefine.c test_cli_util.c
    LABELS unit LIBS PkgConfig::RD_JANSSON ARGS $<TARGET_FILE:shmthrottle>)
  add_dependencies(test_cli_redefine shmthrottle)
endif()
