/* SPDX-License-Identifier: MIT */
/*
 * A helper of the Python binding's tests: a live process that holds every
 * shard lock of a segment's dictionary or counters, so that a writer from
 * Python must wait for it, and that says when one waits.  The binding must
 * let other threads run meanwhile (test_binding.py).
 *
 * Usage: py_lockhold SEGMENT dict|counters.  It prints "locked" once it
 * holds every shard's lock, "waiting" once a waiter sleeps on one of them
 * (the lock's sleeper flag, lock.c), and "released" after it let go of
 * them on a line read from stdin (or at end of input).  While it holds the
 * locks it keeps running (yielding the CPU), so a waiter gives it the
 * running owner's bound (1 s) before SHMT_ELOCKED.  An alarm ends it after
 * 60 s whatever happens.
 */
#include "lock.h"
#include "segment.h"
#include "store.h"

#include "shmthrottle.h"

#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static struct shmt_lock *
shard_lock(const struct shmt_store *st, uint32_t i)
{
	return &((struct shmt_shard *)(st->base + i * st->stride))->ds_lock;
}

int
main(int argc, char **argv)
{
	struct shmt_store *st;
	struct pollfd in = { .fd = 0, .events = POLLIN };
	shmt_t *h = NULL;
	int told = 0, rc;

	if (argc != 3 || (strcmp(argv[2], "dict") != 0 &&
	    strcmp(argv[2], "counters") != 0)) {
		fprintf(stderr, "usage: py_lockhold SEGMENT dict|counters\n");
		return 2;
	}
	alarm(60);
	if ((rc = shmt_open(argv[1], &h)) != 0) {
		fprintf(stderr, "py_lockhold: %s: %s\n", argv[1],
		    shmt_strerror(rc));
		return 1;
	}
	st = strcmp(argv[2], "dict") == 0 ? h->dict : h->counters;
	if (st == NULL || st->shards == 0) {
		fprintf(stderr, "py_lockhold: no %s in %s\n", argv[2], argv[1]);
		return 1;
	}
	for (uint32_t i = 0; i < st->shards; i++)
		if ((rc = shmt__lock(h, shard_lock(st, i))) != 0) {
			fprintf(stderr, "py_lockhold: shard %u: %d\n", i, rc);
			return 1;
		}
	printf("locked\n");
	fflush(stdout);
	for (;;) {
		if (!told)
			for (uint32_t i = 0; i < st->shards; i++)
				if (__atomic_load_n(&shard_lock(st, i)->lk_pad,
				    __ATOMIC_SEQ_CST) != 0) {
					printf("waiting\n");
					fflush(stdout);
					told = 1;
					break;
				}
		if (poll(&in, 1, 0) > 0)
			break;
		sched_yield();
	}
	for (uint32_t i = 0; i < st->shards; i++)
		shmt__unlock(shard_lock(st, i));
	printf("released\n");
	fflush(stdout);
	shmt_close(h);
	return 0;
}
