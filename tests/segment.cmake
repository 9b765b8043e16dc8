# SPDX-License-Identifier: MIT
# Tests of the segment: life cycle, refusals, concurrent creation, the
# installed package, and the public header compiled on its own.
shmt_add_test(test_segment SOURCES test_segment.c LABELS unit TIMEOUT 60)
# The hooks around a call's sleeps (shmt_set_sleep_hooks).
shmt_add_test(test_sleep_hooks SOURCES test_sleep_hooks.c LABELS unit TIMEOUT 120)
shmt_add_test(test_segment_race SOURCES test_segment_race.c LABELS stress TIMEOUT 300)

# The installed package, used from outside the tree.  It installs the build
# tree, so it runs after everything is built.
find_program(SHMT_BASH bash REQUIRED)
add_test(NAME test_install
  COMMAND ${SHMT_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_install.sh
          ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(test_install PROPERTIES LABELS unit TIMEOUT 300)

# The public header on its own, as strict C11 and as C++11.  Warnings are
# errors here whatever SHMT_WERROR says: this is what the check is for.
set(SHMT_HEADER_FLAGS -Wall -Wextra -pedantic -Werror)
add_library(shmt_header_c OBJECT header_c.c)
set_target_properties(shmt_header_c PROPERTIES C_STANDARD 11 C_EXTENSIONS OFF)
target_include_directories(shmt_header_c PRIVATE ${PROJECT_SOURCE_DIR}/lib/include)
target_compile_options(shmt_header_c PRIVATE ${SHMT_HEADER_FLAGS})

add_executable(header_cxx header_cxx.cc)
set_target_properties(header_cxx PROPERTIES CXX_STANDARD 11 CXX_EXTENSIONS OFF
  CXX_STANDARD_REQUIRED ON)
target_compile_options(header_cxx PRIVATE ${SHMT_HEADER_FLAGS})
target_link_libraries(header_cxx PRIVATE shmthrottle_shared)
add_test(NAME header_cxx COMMAND header_cxx)
set_tests_properties(header_cxx PROPERTIES LABELS unit TIMEOUT 30)
# A removed segment answers SHMT_ESTALE; another namespace SHMT_ENAMESPACE.
shmt_add_test(test_stale SOURCES test_stale.c LABELS unit TIMEOUT 60)
# Images of limiters granting in other processes while they are taken.
shmt_add_test(test_image_cut SOURCES test_image_cut.c LABELS stress TIMEOUT 120)
