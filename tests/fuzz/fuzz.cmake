# SPDX-License-Identifier: MIT
# libFuzzer targets (SHMT_FUZZ=ON, clang): the config parser, the duration
# and size parsers, the segment validator, the snapshot loader and the CLI's
# argument handling.  The library, the daemon's config and snapshot code and
# the CLI are compiled into each target with coverage instrumentation and
# ASan+UBSan.  Each target is a ctest labelled `fuzz` that runs for
# $SHMT_FUZZ_SECONDS (default 15) from its seed corpus in tests/fuzz/<target>/
# and replays every input kept under tests/fuzz/<target>/crashes-fixed/.
# By hand, longer: SHMT_FUZZ_SECONDS=600 ctest -L fuzz, or run a target on
# its own (see tests/fuzz/run.sh).
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
  ${PROJECT_SOURCE_DIR}/daemon/config.c
  ${PROJECT_SOURCE_DIR}/daemon/snapshot.c
  ${PROJECT_SOURCE_DIR}/daemon/log.c
  ${SHMT_FUZZ_DIR}/fuzz_util.c)
target_include_directories(shmt_fuzz_core PUBLIC
  ${PROJECT_SOURCE_DIR}/lib/include ${PROJECT_SOURCE_DIR}/lib
  ${PROJECT_SOURCE_DIR}/daemon ${SHMT_FUZZ_DIR})
target_compile_options(shmt_fuzz_core PUBLIC ${SHMT_FUZZ_CFLAGS})
target_compile_definitions(shmt_fuzz_core PUBLIC SHMT_STATIC=1)
target_link_libraries(shmt_fuzz_core PUBLIC PkgConfig::CK PkgConfig::SODIUM PkgConfig::FZ_INIH
  Threads::Threads atomic rt)

file(GLOB SHMT_FUZZ_CLI_SOURCES ${PROJECT_SOURCE_DIR}/cli/*.c)
# main.c's main() becomes shmtc_main(), called by the target.
set_source_files_properties(${PROJECT_SOURCE_DIR}/cli/main.c PROPERTIES
  COMPILE_DEFINITIONS main=shmtc_main
  COMPILE_OPTIONS -Wno-missing-prototypes)

add_custom_target(shmt_fuzz)
find_program(SHMT_FUZZ_BASH bash REQUIRED)

# shmt_add_fuzz(NAME SOURCES src... [OPTIONS libfuzzer-option...])
function(shmt_add_fuzz name)
  cmake_parse_arguments(F "" "" "SOURCES;OPTIONS" ${ARGN})
  add_executable(${name} ${F_SOURCES})
  target_link_libraries(${name} PRIVATE shmt_fuzz_core)
  target_link_options(${name} PRIVATE ${SHMT_FUZZ_LDFLAGS})
  add_dependencies(shmt_fuzz ${name})
  add_test(NAME ${name}
    COMMAND ${SHMT_FUZZ_BASH} ${SHMT_FUZZ_DIR}/run.sh $<TARGET_FILE:${name}>
            ${CMAKE_CURRENT_BINARY_DIR}/fuzz-work/${name} ${SHMT_FUZZ_DIR}/${name} ${F_OPTIONS})
  set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT 900)
endfunction()

shmt_add_fuzz(fuzz_config SOURCES ${SHMT_FUZZ_DIR}/fuzz_config.c)
shmt_add_fuzz(fuzz_units SOURCES ${SHMT_FUZZ_DIR}/fuzz_units.c)
shmt_add_fuzz(fuzz_segment SOURCES ${SHMT_FUZZ_DIR}/fuzz_segment.c)
shmt_add_fuzz(fuzz_snapshot SOURCES ${SHMT_FUZZ_DIR}/fuzz_snapshot.c)
# The tool's usage errors would drown the fuzzer's own output: its stderr
# is closed (sanitizer reports still come through).
shmt_add_fuzz(fuzz_cli SOURCES ${SHMT_FUZZ_DIR}/fuzz_cli.c ${SHMT_FUZZ_CLI_SOURCES}
  OPTIONS -close_fd_mask=2)
target_include_directories(fuzz_cli PRIVATE ${PROJECT_SOURCE_DIR}/cli)
target_compile_definitions(fuzz_cli PRIVATE SHMT_CLI_HAVE_CONFIG=1)
target_link_libraries(fuzz_cli PRIVATE PkgConfig::FZ_JANSSON m)
