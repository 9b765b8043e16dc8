# SPDX-License-Identifier: MIT
# Global limiters: the lease words and what the daemon publishes (unit),
# and a fleet of three simulated hosts with their daemons and one real
# redis-server (stress).
if(TARGET shmtd_core)
  pkg_check_modules(HIREDIS_T REQUIRED IMPORTED_TARGET hiredis)
  shmt_add_test(test_global
    SOURCES test_global.c
    LIBS PkgConfig::HIREDIS_T shmtd_core shmt_config
    LABELS unit TIMEOUT 60)
endif()
if(TARGET shmthrottled AND TARGET test_global)
  add_dependencies(test_global shmthrottled)
  add_test(NAME test_global_fleet
    COMMAND test_global $<TARGET_FILE:shmthrottled> fleet)
  set_tests_properties(test_global_fleet PROPERTIES LABELS stress TIMEOUT 180)
endif()
if(TARGET shmthrottled AND TARGET test_global)
  add_test(NAME test_global_cluster
    COMMAND test_global $<TARGET_FILE:shmthrottled> cluster)
  set_tests_properties(test_global_cluster PROPERTIES LABELS stress TIMEOUT 180)
endif()
