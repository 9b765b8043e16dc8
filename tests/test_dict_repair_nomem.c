/* SPDX-License-Identifier: MIT */
/*
 * A shard repair that fails for want of memory (its bitmap is allocated):
 * the lock must not be let go as if nothing had happened, or the next
 * writer would trust what the dead one left (an armed undo record, an odd
 * version, a half-written value) and a later reader could take a torn
 * value for a whole one.  This test links with --wrap=calloc, so that the
 * library's allocations fail exactly while it asks.
 */
#include "testutil.h"

#include "dict.h"
#include "lock.h"
#include "store.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);

static volatile int fail_calloc;

void *
__wrap_calloc(size_t n, size_t size)
{
	if (fail_calloc) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_calloc(n, size);
}

static struct shmt_shard *
shard_of_key(shmt_t *h, const char *key)
{
	const struct shmt_store *st = h->dict;

	return shard_at(st, shard_of(st, key_hash(h, key, strlen(key))));
}

/* A child that overwrites KEY's value with VAL and dies half way, holding
 * the shard's lock with the version odd and the undo record armed. */
static void
die_half_way(shmt_t *h, const char *key, const char *val)
{
	const struct shmt_store *st = h->dict;
	uint64_t hash = key_hash(h, key, strlen(key)), *link;
	struct shmt_shard *sh = shard_at(st, shard_of(st, hash));
	struct shmt_item *it;

	if (shmt__shard_lock(st, sh) < 0)
		_exit(2);
	it = shmt__store_find(st, sh, hash, key, strlen(key), &link);
	if (it == NULL)
		_exit(3);
	shmt__store_overwrite_begin(st, sh, it);
	memcpy((char *)(it + 1) + strlen(key), val, strlen(val) / 2);
	raise(SIGKILL);
	_exit(4);
}

static void
get_is(shmt_t *h, const char *key, const char *want)
{
	char buf[64];
	size_t n = 0;

	assert_int_equal(shmt_get(h, key, strlen(key), buf, sizeof(buf), &n), 0);
	assert_int_equal(n, strlen(want));
	assert_memory_equal(buf, want, n);
}

/* The writer after the dead one cannot repair (no memory): it fails, and
 * leaves the lock to be taken over again; the next writer repairs, and
 * the victim reads its old value whole, before and after that writer's
 * own overwrite of another key of the shard. */
static void
test_repair_without_memory(void **state)
{
	/* 32 bytes: with the key, too long for the bucket's slot (the item
	 * is in the heap, overwritten in place). */
	const char *oldv = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    *newv = "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB";
	shmt_dict_stat_t ds;
	shmt_config_t cfg;
	char seg[64], other[32];
	struct shmt_shard *sh;
	shmt_t *h = NULL;
	int status, rc;
	pid_t pid;

	(void)state;
	tu_config_tiny(&cfg);
	tu_segname(seg, sizeof(seg), "nomem");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	assert_int_equal(shmt_set(h, "victim", 6, oldv, strlen(oldv), 0), 0);
	sh = shard_of_key(h, "victim");
	/* Another key of the same shard. */
	for (int i = 0;; i++) {
		snprintf(other, sizeof(other), "other%d", i);
		if (shard_of_key(h, other) == sh)
			break;
	}
	assert_int_equal(shmt_set(h, other, strlen(other), "y1", 2, 0), 0);
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		die_half_way(h, "victim", newv);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

	fail_calloc = 1;
	rc = shmt_set(h, other, strlen(other), "y2", 2, 0);
	fail_calloc = 0;
	assert_int_equal(rc, -ENOMEM);
	/* Not free: the next locker takes it over and repairs. */
	assert_int_equal(shmt__lock_owner(&sh->ds_lock), SHMT_LOCK_UNREPAIRED);
	assert_int_equal(shmt_set(h, other, strlen(other), "y3", 2, 0), 0);
	assert_int_equal(shmt_dict_stat(h, &ds), 0);
	assert_int_equal(ds.repairs, 1);
	get_is(h, "victim", oldv);
	get_is(h, other, "y3");
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	tu_close_unlink(h, seg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_repair_without_memory, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
