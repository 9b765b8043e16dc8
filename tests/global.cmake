# SPDX-License-Identifier: MIT
# Global limiters: the lease words (unit), and a fleet of three simulated
# hosts with their daemons and one real redis-server (stress).
pkg_check_modules(HIREDIS_T REQUIRED IMPORTED_TARGET hiredis)
shmt_add_test(test_global
  SOURCES test_global.c
  LIBS PkgConfig::HIREDIS_T
  LABELS unit TIMEOUT 60)
if(TARGET shmthrottled)
  add_dependencies(test_global shmthrottled)
  add_test(NAME test_global_fleet
    COMMAND test_global $<TARGET_FILE:shmthrottled> fleet)
  set_tests_properties(test_global_fleet PROPERTIES LABELS stress TIMEOUT 180)
endif()
