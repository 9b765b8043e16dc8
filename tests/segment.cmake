# SPDX-License-Identifier: MIT
# Tests of the segment: life cycle, refusals, concurrent creation, the
# installed package, and the public header compiled on its own.
shmt_add_test(test_segment SOURCES test_segment.c LABELS unit TIMEOUT 60)
shmt_add_test(test_segment_race SOURCES test_segment_race.c LABELS stress TIMEOUT 300)

# The installed package, used from outside the tree.  It installs the build
# tree, so it runs after everything is built.
find_program(SHMT_BASH bash REQUIRED)
add_test(NAME test_install
  COMMAND ${SHMT_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_install.sh
          ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(test_install PROPERTIES LABELS unit TIMEOUT 300)
