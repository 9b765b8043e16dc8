# SPDX-License-Identifier: MIT
# Handles carried across fork() (lib/fork.c): real child processes.
shmt_add_test(test_fork SOURCES test_fork.c LABELS unit TIMEOUT 60
  LIBS Threads::Threads)
