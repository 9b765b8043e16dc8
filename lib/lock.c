/* SPDX-License-Identifier: MIT */
/*
 * The segment's writer locks: a word with the owner's thread id, taken by
 * CAS, waited for by spinning on reads of the word (a CAS only once it
 * reads free: waiters that CAS a held word would steal the line from the
 * owner, whose shard header shares it), then by sleeping on a futex,
 * with owner-death recovery by a liveness check of the owner's thread.
 * Critical sections are short (microseconds; a 1 MiB copy or a repair at
 * worst), so fairness is not needed.
 *
 * Sleepers: lk_pad is 1 while a waiter may sleep on it.  A waiter stores 1
 * there, then reads the owner again, then sleeps while lk_pad is still 1;
 * an unlock clears the owner, then reads lk_pad, and when it finds 1,
 * clears it and wakes one sleeper.  Both sides' store and load are
 * sequentially consistent, so either the waiter sees the lock free or the
 * unlock sees the flag.  A waiter that slept takes the lock with lk_pad
 * set again (others may sleep still), so its unlock wakes the next one:
 * a contended spell costs one wake too many at its end, as a futex mutex
 * does; a woken waiter that gives up (SHMT_ELOCKED) wakes the next one
 * instead.  Every sleep has a timeout (SHMT_LOCK_SLEEP_NS), so a sleeper
 * whose wake was lost (a woken waiter killed before it passed the flag on,
 * an owner that died, or an unlock by a build older than the flag, which
 * wakes nobody) looks again within it.  A waiter killed while the flag is
 * set costs the next unlock one wake system call.
 */
#include "lock.h"

#include "fork.h"

#include "segment.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/futex.h>

#include <ck_pr.h>

/*
 * How long a writer waits for a lock whose owner is alive.  Critical
 * sections take microseconds (a 1 MiB copy or a shard repair: a few
 * milliseconds), and a writer inside one runs, waits for a CPU, or waits in
 * the kernel uninterruptibly (a page fault): it never sleeps.  So an owner
 * found sleeping or stopped, and still holding the lock
 * SHMT_LOCK_LIVE_WAIT_NS after it was first seen, is a stopped writer or no
 * writer at all (a damaged or hostile lock word that names a live, attached
 * process).  The waiter cannot tell these apart and must never take a lock
 * from a live owner (a stopped writer that resumes would share the shard
 * with it), so it gives up with SHMT_ELOCKED rather than stall its caller.
 * An owner that runs gets up to SHMT_LOCK_WAIT_MAX_NS: on a loaded machine
 * a preempted writer may wait tens of milliseconds for a CPU, and giving
 * up on it would turn load into errors.  Longer bounds make damage cost
 * more per call; shorter ones make errors of a busy machine.  The time
 * counts from when the current owner was first seen: a lock that changes
 * hands restarts it.
 */
#define SHMT_LOCK_LIVE_WAIT_NS (100ULL * 1000000ULL)
/* The bound on the whole wait, whoever holds the lock and whatever it does:
 * writers that keep taking it in turn could otherwise starve one waiter
 * without end, and a damaged word may name a busy process.  Ten idle-owner
 * bounds: far beyond any hold seen in the stress tests, far below the
 * seconds that would stall a caller. */
#define SHMT_LOCK_WAIT_MAX_NS (10 * SHMT_LOCK_LIVE_WAIT_NS)

/* Reads of a held word (each after a pause) before a waiter sleeps: a
 * few microseconds, about the longest common hold (a dictionary write). */
#define SHMT_LOCK_SPINS 256
/* The longest sleep at a time: an owner's death, or a wake lost to a
 * killed waiter, is noticed within it. */
#define SHMT_LOCK_SLEEP_NS (500ULL * 1000ULL)
uint64_t shmt__lock_sleep_ns = SHMT_LOCK_SLEEP_NS;

/* Thread ids are below PID_MAX_LIMIT (2^22) on Linux. */
#define SHMT_TID_MAX (1U << 22)
_Static_assert(SHMT_LOCK_UNREPAIRED >= SHMT_TID_MAX,
    "an unrepaired lock names no thread");

static __thread uint32_t my_tid;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* A child of fork() is another thread: forget the parent's id. */
static void
tid_forget(void)
{
	my_tid = 0;
}

static void
atfork_register(void)
{
	pthread_atfork(NULL, NULL, tid_forget);
}

static uint32_t
tid_self(void)
{
	if (my_tid == 0) {
		pthread_once(&atfork_once, atfork_register);
		my_tid = shmt__env_tid();
	}
	return my_tid;
}

/* 1 when OWNER names a thread that exists now, of a process that holds a
 * slot of the segment; *RUNNING as shmt__tid_status().  Where the
 * thread's status cannot be read (this process out of descriptors, /proc
 * hidden or absent), each slot's process is asked whether OWNER is one of
 * its threads (tgkill(2) with no signal): one is, and it counts as alive
 * and running (the waiter's bound then ends its wait with SHMT_ELOCKED;
 * nobody takes a lock from a live holder on a guess); none is, and the
 * owner is dead (a tid reused by an unattached process holds nothing). */
static int
owner_alive(shmt_t *h, uint32_t owner, int *running)
{
	int saved = errno, alive;

	*running = 0;
	if (owner == 0 || owner >= SHMT_TID_MAX)
		return 0;
	alive = shmt__env_kill0((pid_t)owner) == 0 || errno == EPERM;
	if (alive && h != NULL) {
		pid_t p = shmt__tid_status(owner, running);

		if (p < 0)
			*running = alive = shmt__slot_has_thread(h, owner);
		else
			alive = shmt__slot_held_by(h, p);
	}
	errno = saved;
	return alive;
}

void
shmt__lock_init(struct shmt_lock *l)
{
	__atomic_store_n(&l->lk_owner, 0, __ATOMIC_RELEASE);
	l->lk_pad = 0;
}

/* One attempt: 0 or 1 as shmt__lock, or -EBUSY with the owner in *SEEN
 * (and, when CHECK asked for the owner's liveness, whether it runs in
 * *RUNNING). */
static int
lock_once(shmt_t *h, struct shmt_lock *l, uint32_t me, int check,
    uint32_t *seen, int *running)
{
	uint32_t cur = __atomic_load_n(&l->lk_owner, __ATOMIC_RELAXED);

	if (cur == 0 && __atomic_compare_exchange_n(&l->lk_owner, &cur, me, 0,
	    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return 0;
	*seen = cur;
	/* Our own id in the word: a thread that had this id died holding it
	 * (ids are reused), since no thread takes a lock it holds. */
	if (cur != 0 && (cur == me || (check && !owner_alive(h, cur, running)))) {
		if (__atomic_compare_exchange_n(&l->lk_owner, &cur, me, 0,
		    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return 1;
	}
	return -EBUSY;
}

/* Wake one sleeper of L, if any. */
static void
lock_wake(struct shmt_lock *l)
{
	int saved = errno;

	syscall(SYS_futex, &l->lk_pad, FUTEX_WAKE, 1, NULL, NULL, 0);
	errno = saved;
}

/* Sleep until an unlock wakes us or SHMT_LOCK_SLEEP_NS passes, unless the
 * word no longer holds SEEN.  1 when the sleep timed out. */
static int
lock_sleep(const shmt_t *h, struct shmt_lock *l, uint32_t seen)
{
	uint64_t ns = shmt__lock_sleep_ns;
	struct timespec ts = { (time_t)(ns / 1000000000ULL),
	    (long)(ns % 1000000000ULL) };
	int saved = errno, timed_out;
	struct shmt_sleep sl;

	__atomic_exchange_n(&l->lk_pad, 1, __ATOMIC_SEQ_CST);
	if (seen == 0 || __atomic_load_n(&l->lk_owner, __ATOMIC_SEQ_CST) != seen)
		return 0;
	sl = shmt__sleep_begin(h);
	timed_out = syscall(SYS_futex, &l->lk_pad, FUTEX_WAIT, 1, &ts, NULL,
	    0) != 0 && errno == ETIMEDOUT;
	shmt__sleep_end(sl);
	errno = saved;
	return timed_out;
}

int
shmt__lock_try(shmt_t *h, struct shmt_lock *l)
{
	uint32_t seen;
	int running, rc;

	/* A forked child first takes its own slot, so that others see the
	 * lock's new owner alive (fork.h). */
	if ((rc = shmt__fork_check(h)) != 0)
		return rc;
	return lock_once(h, l, tid_self(), 1, &seen, &running);
}

int
shmt__lock(shmt_t *h, struct shmt_lock *l)
{
	uint32_t me = tid_self(), seen = 0, owner = 0;
	uint64_t start = 0, since = 0, now;
	int running = 1, frc, slept = 0, timed_out = 0;

	/* A forked child first takes its own slot: a holder without one
	 * would look dead to the next waiter, which would take the lock
	 * over while the child is inside (fork.h). */
	if ((frc = shmt__fork_check(h)) != 0)
		return frc;

	for (unsigned i = 0;; i++) {
		/* The liveness check is a system call: only now and then, and
		 * after each sleep that no unlock ended. */
		int rc = lock_once(h, l, me, i % 64 == 63 || timed_out, &seen,
		    &running);

		if (rc >= 0) {
			/* Others may sleep still: our unlock wakes the next. */
			if (slept)
				__atomic_store_n(&l->lk_pad, 1, __ATOMIC_SEQ_CST);
			return rc;
		}
		if (i < SHMT_LOCK_SPINS) {
			ck_pr_stall();
			continue;
		}
		now = shmt__mono_ns();
		if (start == 0)
			start = now;
		if (seen != owner) {
			owner = seen;
			since = now;
			running = 1;
		}
		if ((!running && now - since > SHMT_LOCK_LIVE_WAIT_NS) ||
		    now - start > SHMT_LOCK_WAIT_MAX_NS) {
			/* We may have taken the wake meant to pass the lock
			 * on: hand it to the next sleeper, or none would be
			 * woken until its sleep ends. */
			if (slept)
				lock_wake(l);
			return SHMT_ELOCKED;
		}
		timed_out = lock_sleep(h, l, seen);
		slept = 1;
	}
}

uint32_t
shmt__lock_owner(const struct shmt_lock *l)
{
	return __atomic_load_n(&l->lk_owner, __ATOMIC_RELAXED);
}

static void
unlock_to(struct shmt_lock *l, uint32_t owner)
{
	__atomic_exchange_n(&l->lk_owner, owner, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&l->lk_pad, __ATOMIC_SEQ_CST) == 0 ||
	    __atomic_exchange_n(&l->lk_pad, 0, __ATOMIC_SEQ_CST) == 0)
		return;
	lock_wake(l);
}

void
shmt__unlock(struct shmt_lock *l)
{
	unlock_to(l, 0);
}

void
shmt__unlock_unrepaired(struct shmt_lock *l)
{
	unlock_to(l, SHMT_LOCK_UNREPAIRED);
}

int
shmt__lock_peek(shmt_t *h, struct shmt_lock *l, uint32_t *owner)
{
	uint32_t cur = __atomic_load_n(&l->lk_owner, __ATOMIC_ACQUIRE);
	int running;

	*owner = cur;
	if (cur == 0)
		return SHMT_LOCK_FREE;
	/* Our own id: the caller holds no lock while it looks, so a thread
	 * that had this id died holding it (as in lock_once). */
	if (cur == tid_self())
		return SHMT_LOCK_DEAD;
	return owner_alive(h, cur, &running) ? SHMT_LOCK_LIVE : SHMT_LOCK_DEAD;
}
