/* This file is private to libshmthrottle: the segment's writer locks. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_LOCK_H
#define SHMT_LOCK_H

#include <stdint.h>
#include <sys/types.h>

/*
 * A lock in the segment: one word holding the owner's thread id, 0 when
 * free.  It replaces a robust process-shared pthread mutex for two reasons:
 * glibc trusts the mutex's own fields (its kind, its owner), so a damaged
 * segment could steer glibc into an assertion or a crash; and it keeps no
 * pointer or libc state in the segment.  Owner death is found by asking
 * whether the owner's thread still exists; a word naming no live thread is
 * taken over, and the taker repairs what the lock guards, as with
 * EOWNERDEAD.  A live owner is a thread that exists and whose process holds
 * a slot in the segment (every handle claims one), so a damaged word that
 * happens to name some unrelated thread is taken over too.  A reused thread
 * id can only delay recovery (the lock then looks held: the waiter gives up
 * with SHMT_ELOCKED), never hand the lock to two owners.
 */
struct shmt_lock {
	uint32_t lk_owner;
	uint32_t lk_pad;                /* 1: a waiter may sleep on it (a
	                                 * futex word; lock.c) */
};

/* The longest a waiter sleeps before it looks at the lock again (500 us):
 * how soon an owner's death, or a wake lost to a killed waiter, is seen.
 * Process-local; tests raise it so that a lost wake hangs. */
extern uint64_t shmt__lock_sleep_ns;

struct shmt;

void shmt__lock_init(struct shmt_lock *l);
/* 0: locked; 1: locked, taken from a dead owner (repair first); or
 * SHMT_ELOCKED when one live owner, sleeping or stopped, kept it for
 * SHMT_LOCK_LIVE_WAIT_NS (100 ms), or the wait passed SHMT_LOCK_WAIT_MAX_NS
 * (1 s) in all.  A live
 * owner is never robbed.  H is the handle of the segment the lock lives
 * in: an owner counts as live only while its process holds a slot there. */
int shmt__lock(struct shmt *h, struct shmt_lock *l);
/* As shmt__lock without waiting: -EBUSY when a live owner holds it. */
int shmt__lock_try(struct shmt *h, struct shmt_lock *l);
void shmt__unlock(struct shmt_lock *l);
/* Let go of L after a takeover whose repair failed (out of memory): the
 * word then names SHMT_LOCK_UNREPAIRED, an owner no thread can be, so the
 * next locker takes the lock over as from a dead owner (shmt__lock answers
 * 1) and repairs in its turn, where shmt__unlock would have left it free
 * and the damage trusted.  Sleepers are woken as by shmt__unlock. */
void shmt__unlock_unrepaired(struct shmt_lock *l);
/* Above every thread id (PID_MAX_LIMIT is 2^22): read as a dead owner. */
#define SHMT_LOCK_UNREPAIRED (1U << 22)
/* Who holds L, without taking it or writing anything (for the read-only
 * check): SHMT_LOCK_FREE, SHMT_LOCK_LIVE (a live owner, see above) or
 * SHMT_LOCK_DEAD (the word names no live owner, or the calling thread,
 * which holds no lock while it looks: the next locker takes it over and
 * repairs).  *OWNER gets the word. */
enum { SHMT_LOCK_FREE = 0, SHMT_LOCK_LIVE = 1, SHMT_LOCK_DEAD = 2 };
int shmt__lock_peek(struct shmt *h, struct shmt_lock *l, uint32_t *owner);
/* The thread id in the lock word now (0: free), for reports. */
uint32_t shmt__lock_owner(const struct shmt_lock *l);

#endif /* SHMT_LOCK_H */
