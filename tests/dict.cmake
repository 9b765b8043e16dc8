# SPDX-License-Identifier: MIT
# Tests of the dictionary (lib/dict.c): a model call for call, the size
# limits and the room promise, TTLs and eviction, torn-read checks across
# processes and kill -9 of writers, the overwrite in place.  (The windowed counters' tests are in
# counters.cmake.)
shmt_add_test(test_dict_model SOURCES test_dict_model.c LABELS unit single-thread TIMEOUT 300)
shmt_add_test(test_dict_limits SOURCES test_dict_limits.c LABELS unit single-thread TIMEOUT 300)
shmt_add_test(test_dict_evict SOURCES test_dict_evict.c LABELS unit single-thread TIMEOUT 120)
shmt_add_test(test_dict_mp SOURCES test_dict_mp.c LABELS stress TIMEOUT 600)
shmt_add_test(test_dict_kill SOURCES test_dict_kill.c LABELS stress TIMEOUT 600)
shmt_add_test(test_dict_layout SOURCES test_dict_layout.c LABELS unit single-thread TIMEOUT 300)
shmt_add_test(test_dict_inplace SOURCES test_dict_inplace.c LABELS unit single-thread TIMEOUT 120)
shmt_add_test(test_dict_inplace_mp SOURCES test_dict_inplace_mp.c LABELS stress single-thread TIMEOUT 300)
# A shard repair that fails for want of memory: the library's calloc fails
# on demand (--wrap=calloc), the next writer repairs.
shmt_add_test(test_dict_repair_nomem SOURCES test_dict_repair_nomem.c LABELS unit single-thread TIMEOUT 120)
target_link_options(test_dict_repair_nomem PRIVATE -Wl,--wrap=calloc)
