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
 *
 * py_lockhold SEGMENT freeze: the segment frozen instead, as a live mover
 * holds it while it copies (move.c), so that every call that lands on it
 * waits for the move's outcome (at most 5 s); "locked" once frozen,
 * "released" once thawed (the move given up) on a line from stdin.
 */
#include "daemon.h"
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

/* Freeze H's segment as a live mover would, until a line comes on stdin;
 * then thaw it (LIVE again, as a mover that gives up leaves it). */
static int
freeze(shmt_t *h)
{
	uint64_t w = shmt__genword_load(h->hdr);
	char line[16];

	__atomic_store_n(&h->hdr->sh_mover_pid, (int64_t)getpid(),
	    __ATOMIC_RELEASE);
	__atomic_store_n(&h->hdr->sh_mover_start, shmt__proc_start(getpid()),
	    __ATOMIC_RELEASE);
	if ((uint32_t)w != SHMT_SEG_LIVE || !shmt__genword_cas(h->hdr, &w,
	    SHMT_SEG_FROZEN, (uint32_t)(w >> 32) + 1)) {
		fprintf(stderr, "py_lockhold: cannot freeze\n");
		return 1;
	}
	printf("locked\n");
	fflush(stdout);
	(void)fgets(line, sizeof(line), stdin);
	w = shmt__genword_load(h->hdr);
	if ((uint32_t)w != SHMT_SEG_FROZEN || !shmt__genword_cas(h->hdr, &w,
	    SHMT_SEG_LIVE, (uint32_t)(w >> 32))) {
		fprintf(stderr, "py_lockhold: cannot thaw\n");
		return 1;
	}
	printf("released\n");
	fflush(stdout);
	shmt_close(h);
	return 0;
}

int
main(int argc, char **argv)
{
	struct shmt_store *st;
	struct pollfd in = { .fd = 0, .events = POLLIN };
	shmt_t *h = NULL;
	int told = 0, rc;

	if (argc != 3 || (strcmp(argv[2], "dict") != 0 &&
	    strcmp(argv[2], "counters") != 0 &&
	    strcmp(argv[2], "freeze") != 0)) {
		fprintf(stderr, "usage: py_lockhold SEGMENT "
		    "dict|counters|freeze\n");
		return 2;
	}
	alarm(60);
	if ((rc = shmt_open(argv[1], &h)) != 0) {
		fprintf(stderr, "py_lockhold: %s: %s\n", argv[1],
		    shmt_strerror(rc));
		return 1;
	}
	if (strcmp(argv[2], "freeze") == 0)
		return freeze(h);
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
