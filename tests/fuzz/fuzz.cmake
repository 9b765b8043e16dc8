# SPDX-License-Identifier: MIT
# libFuzzer targets (SHMT_FUZZ=ON, clang): the config parser, the duration
# and size parsers, the segment validator, the snapshot loader and the CLI's
# argument handling.  The library, the daemon's config and snapshot code and
# the CLI are compiled into each target with coverage instrumentation and
# ASan+UBSan.  Each target's corpus is tests/fuzz/corpus/<target>/ (seeds)
# and tests/fuzz/corpus/<target>/crashes-fixed/ (inputs that once failed).
# Two ctests per target (see tests/fuzz/run.sh):
#   <target>          label `fuzz`, run by scripts/test.sh: replays the
#                     whole corpus, then a fixed number of mutations (RUNS)
#                     from a fixed seed; the same code, the same verdict.
#   <target>_explore  label `fuzz-explore`, by hand only: a random seed for
#                     $SHMT_FUZZ_SECONDS (default 300) per target.
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "SHMT_FUZZ needs clang: -DCMAKE_C_COMPILER=clang")
endif()
pkg_check_modules(FZ_INIH REQUIRED IMPORTED_TARGET inih)
pkg_check_modules(FZ_JANSSON REQUIRED IMPORTED_TARGET jansson)

set(SHMT_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
set(SHMT_FUZZ_CFLAGS -g -O1 -fno-omit-frame-pointer
    -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined)
set(SHMT_FUZZ_LDFLAGS -fsanitize=fuzzer,address,undefined)

file(GLOB SHMT_FUZZ_LIB_SOURCES ${PROJECT_SOURCE_DIR}/lib/*.c)
add_library(shmt_fuzz_core STATIC ${SHMT_FUZZ_LIB_SOURCES}
  ${PROJECT_SOURCE_DIR}/conf/config.c
  ${PROJECT_SOURCE_DIR}/conf/units.c
  ${PROJECT_SOURCE_DIR}/conf/addr.c
  ${PROJECT_SOURCE_DIR}/conf/prom.c
  ${PROJECT_SOURCE_DIR}/daemon/snapshot.c
  ${PROJECT_SOURCE_DIR}/daemon/log.c
  ${SHMT_FUZZ_DIR}/fuzz_util.c)
# lib/rcu.c: see lib/CMakeLists.txt (liburcu-bp's misaligned records).
set_source_files_properties(${PROJECT_SOURCE_DIR}/lib/rcu.c PROPERTIES
  COMPILE_OPTIONS -fno-sanitize=alignment)
target_include_directories(shmt_fuzz_core PUBLIC
  ${PROJECT_SOURCE_DIR}/lib/include ${PROJECT_SOURCE_DIR}/lib
  ${PROJECT_SOURCE_DIR}/conf ${PROJECT_SOURCE_DIR}/daemon ${SHMT_FUZZ_DIR})
target_compile_options(shmt_fuzz_core PUBLIC ${SHMT_FUZZ_CFLAGS})
# SHMT_FUZZ_ENV: this copy of the library (and the CLI of fuzz_cli) sees a
# fixed host, defined in fuzz_util.c (lib/env.h): the same pid, clocks and
# random bytes on every run.  Only the fuzz targets are built with it.
target_compile_definitions(shmt_fuzz_core PUBLIC SHMT_STATIC=1 SHMT_FUZZ_ENV=1)
target_link_libraries(shmt_fuzz_core PUBLIC PkgConfig::CK PkgConfig::FZ_INIH
  Threads::Threads atomic rt urcu-bp)

file(GLOB SHMT_FUZZ_CLI_SOURCES ${PROJECT_SOURCE_DIR}/cli/*.c)
# main.c's main() becomes shmtc_main(), called by the target.
set_source_files_properties(${PROJECT_SOURCE_DIR}/cli/main.c PROPERTIES
  COMPILE_DEFINITIONS main=shmtc_main
  COMPILE_OPTIONS -Wno-missing-prototypes)

add_custom_target(shmt_fuzz)
find_program(SHMT_FUZZ_BASH bash REQUIRED)

# shmt_add_fuzz(NAME SOURCES src... RUNS n [OPTIONS libfuzzer-option...]):
# RUNS is what the gate runs, chosen for a few seconds to about 30 s per
# target on 2 cores.
function(shmt_add_fuzz name)
  cmake_parse_arguments(F "" "RUNS" "SOURCES;OPTIONS" ${ARGN})
  add_executable(${name} ${F_SOURCES})
  target_link_libraries(${name} PRIVATE shmt_fuzz_core)
  target_link_options(${name} PRIVATE ${SHMT_FUZZ_LDFLAGS})
  add_dependencies(shmt_fuzz ${name})
  set(corpus ${SHMT_FUZZ_DIR}/corpus/${name})
  set(work ${CMAKE_CURRENT_BINARY_DIR}/fuzz-work)
  add_test(NAME ${name}
    COMMAND ${SHMT_FUZZ_BASH} ${SHMT_FUZZ_DIR}/run.sh gate
            $<TARGET_FILE:${name}> ${work}/${name} ${corpus} ${F_OPTIONS})
  set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT 900
    ENVIRONMENT SHMT_FUZZ_RUNS=${F_RUNS})
  add_test(NAME ${name}_explore
    COMMAND ${SHMT_FUZZ_BASH} ${SHMT_FUZZ_DIR}/run.sh explore
            $<TARGET_FILE:${name}> ${work}/${name}_explore ${corpus}
            ${F_OPTIONS})
  set_tests_properties(${name}_explore PROPERTIES LABELS fuzz-explore
    TIMEOUT 86400)
endfunction()

shmt_add_fuzz(fuzz_config SOURCES ${SHMT_FUZZ_DIR}/fuzz_config.c RUNS 6000)
shmt_add_fuzz(fuzz_units SOURCES ${SHMT_FUZZ_DIR}/fuzz_units.c RUNS 200000)
shmt_add_fuzz(fuzz_segment SOURCES ${SHMT_FUZZ_DIR}/fuzz_segment.c RUNS 2000)
shmt_add_fuzz(fuzz_snapshot SOURCES ${SHMT_FUZZ_DIR}/fuzz_snapshot.c RUNS 1500)
# The tool's usage errors would drown the fuzzer's own output: its stderr
# is closed (sanitizer reports still come through).
shmt_add_fuzz(fuzz_cli SOURCES ${SHMT_FUZZ_DIR}/fuzz_cli.c ${SHMT_FUZZ_CLI_SOURCES}
  RUNS 60000 OPTIONS -close_fd_mask=2)
target_include_directories(fuzz_cli PRIVATE ${PROJECT_SOURCE_DIR}/cli)
target_compile_definitions(fuzz_cli PRIVATE SHMT_CLI_HAVE_CONFIG=1)
target_link_libraries(fuzz_cli PRIVATE PkgConfig::FZ_JANSSON m)
