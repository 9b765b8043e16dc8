# SPDX-License-Identifier: MIT
# Hardening: a hostile segment scribbled while others work (stress), one
# precise lie at a time (unit), the
# permissions of another user and group (unit), valgrind memcheck of the CLI
# and a demo worker (unit, normal build only), the kill -9 soak (soak), and
# with SHMT_FUZZ=ON the libFuzzer targets (fuzz and fuzz-explore, see
# tests/fuzz/fuzz.cmake).
option(SHMT_FUZZ "Build the libFuzzer targets (needs clang)" OFF)
if(SHMT_FUZZ)
  include(${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz.cmake)
endif()

shmt_add_test(test_hostile SOURCES test_hostile.c LABELS stress TIMEOUT 120)
shmt_add_test(test_hostile_perms SOURCES test_hostile_perms.c LABELS unit TIMEOUT 60)
shmt_add_test(test_hostile_cases SOURCES test_hostile_cases.c LABELS unit TIMEOUT 120)
shmt_add_test(test_lock_mp SOURCES test_lock_mp.c LABELS unit TIMEOUT 120)
shmt_add_test(test_liveness SOURCES test_liveness.c LABELS unit TIMEOUT 120)
shmt_add_test(test_buckets_read SOURCES test_buckets_read.c LABELS unit TIMEOUT 120)

# valgrind runs the native binaries: only in the build without sanitizers.
if(SHMT_SANITIZE STREQUAL "" AND NOT SHMT_FUZZ AND TARGET shmthrottle
   AND TARGET shmthrottle-demo)
  find_program(SHMT_VG_BASH bash REQUIRED)
  add_test(NAME test_valgrind
    COMMAND ${SHMT_VG_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_valgrind.sh
            $<TARGET_FILE:shmthrottle> $<TARGET_FILE:shmthrottle-demo>
            ${PROJECT_SOURCE_DIR}/daemon/shmthrottled.conf.example)
  set_tests_properties(test_valgrind PROPERTIES LABELS unit TIMEOUT 300
    SKIP_RETURN_CODE 77)
endif()

# The soak: minutes by default (SHMT_SOAK_SECONDS), only by hand.
if(TARGET shmthrottled)
  shmt_add_test(soak SOURCES soak.c LABELS soak TIMEOUT 7200
    ARGS $<TARGET_FILE:shmthrottled>)
  add_dependencies(soak shmthrottled)
else()
  shmt_add_test(soak SOURCES soak.c LABELS soak TIMEOUT 7200)
endif()
