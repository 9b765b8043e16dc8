/* SPDX-License-Identifier: MIT */
/*
 * A waiter sleeps on a futex word in the limiter's row (lm_wake), shared
 * by every process that maps the segment (FUTEX_WAIT, not the private
 * kind), with a timeout at the retry-after its refusal named.  Whoever
 * returns uses to the limiter (a caller or the daemon releasing a bucket)
 * bumps the word and, only when bit 0 says someone may sleep, makes the one
 * system call that wakes every sleeper, which then tries again.
 *
 * No lost wake-up.  The word is lm_wake = count << 1 | sleeper.
 *   waiter:   refused once; set bit 0 (CAS), read the word as SEEN, try
 *             again; refused: FUTEX_WAIT(word, SEEN, retry-after)
 *   releaser: CAS on W that returns uses; then replace the word by
 *             (count + 1) << 1 (bit cleared); if bit 0 was set, FUTEX_WAKE
 * All of these are sequentially consistent.  If the releaser's replacement
 * comes before the waiter set its bit, its release CAS came before the
 * waiter's second try, which sees the uses back.  If it comes after, the
 * word differs from SEEN, and FUTEX_WAIT returns at once (or the wake
 * finds the waiter asleep).  Either way the waiter does not sleep through
 * a release.  A releaser whose replacement finds bit 0 clear makes no
 * system call.
 *
 * kill -9.  A waiter killed while asleep leaves bit 0 set; the next release
 * makes one needless FUTEX_WAKE and clears it.  Nothing else is held: the
 * kernel forgets a dead sleeper.
 *
 * Capacity that comes back by time alone (exact mode, rate mode, a bucket
 * that cools while nobody calls) wakes nobody: the waiter's timeout is the
 * retry-after, so it tries again exactly then.
 */
#include "fork.h"
#include "wait.h"

#include "decide.h"
#include "table.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define WAKE_SLEEPER 1U

void
shmt__wake_waiters(uint32_t *wake)
{
	uint32_t old = __atomic_load_n(wake, __ATOMIC_SEQ_CST), nv;
	unsigned i;

	for (i = 0; i < SHMT_RETRY_MAX; i++) {
		nv = (old + 2) & ~WAKE_SLEEPER;
		if (__atomic_compare_exchange_n(wake, &old, nv, 0,
		    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			break;
	}
	if ((old & WAKE_SLEEPER) || i == SHMT_RETRY_MAX) {
		int e = errno;

		syscall(SYS_futex, wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
		errno = e;
	}
}

/* Mark that a sleeper may come; returns the word as the sleeper must
 * still find it to sleep. */
static uint32_t
wake_mark(uint32_t *wake)
{
	uint32_t old = __atomic_load_n(wake, __ATOMIC_SEQ_CST);

	for (unsigned i = 0; i < SHMT_RETRY_MAX && !(old & WAKE_SLEEPER); i++)
		if (__atomic_compare_exchange_n(wake, &old, old | WAKE_SLEEPER,
		    0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			return old | WAKE_SLEEPER;
	return old;
}

/* Sleep while *WAKE holds SEEN, at most NS nanoseconds.  Returns 0 (woken,
 * changed or timed out) or -EINTR (a signal). */
static int
wake_sleep(const shmt_t *h, uint32_t *wake, uint32_t seen, uint64_t ns)
{
	struct timespec ts;
	struct shmt_sleep sl;
	int e = errno, rc = 0;

	ts.tv_sec = (time_t)(ns / 1000000000ULL);
	ts.tv_nsec = (long)(ns % 1000000000ULL);
	sl = shmt__sleep_begin(h);
	if (syscall(SYS_futex, wake, FUTEX_WAIT, seen, &ts, NULL, 0) != 0 &&
	    errno == EINTR)
		rc = -EINTR;
	shmt__sleep_end(sl);
	errno = e;
	return rc;
}

/* One try for a waiter: the decision in *D, the key name in BUF. */
static int
wait_try(shmt_t *h, const struct shmt_lview *v, const void *client,
    size_t len, uint64_t cost, char *buf, shmt_decision_t *d)
{
	uint64_t cursor = 0;
	int rc;

	if (client != NULL)
		rc = shmt__acquire_client(h, v, client, len, cost, d, NULL);
	else
		rc = shmt__acquire_shared(h, v, cost, &cursor, d, NULL);
	if (rc == 0 && (v->flags & SHMT_LIMF_SHADOW))
		rc = 1;
	if (rc == 1 && buf != NULL)
		rc = shmt__key_copy(v, cursor, buf);
	return rc;
}

/* The segment of H is no longer LIVE: frozen, moved or retired.  A
 * refusal records nothing, so it does not check this (shmt__grant_check
 * checks grants only); a waiter must, or it would sleep on in the old
 * generation after a move woke it. */
static int
seg_gone(const shmt_t *h)
{
	return __atomic_load_n(&h->hdr->sh_retired, __ATOMIC_ACQUIRE) != 0;
}

/* Try, and sleep between tries, until DEADLINE (CLOCK_MONOTONIC ns; 0:
 * one try).  SHMT_ESTALE when the segment stopped being LIVE while
 * refused: SHMT_GEN_CALL then waits out the move and tries again in the
 * generation the name holds, with the same deadline. */
static int
wait_loop(shmt_t *h, const struct shmt_lview *v, const void *client,
    size_t len, uint64_t cost, uint64_t deadline, char *buf,
    shmt_decision_t *out)
{
	uint32_t *wake = &v->lim->lm_wake;
	shmt_decision_t d;
	int rc = wait_try(h, v, client, len, cost, buf, &d);

	while (rc == 0 && deadline != 0) {
		uint32_t seen = wake_mark(wake);
		uint64_t now, sleep;

		/* A limiter deleted while we slept grants nothing more
		 * (shmt_limiter_delete wakes its sleepers). */
		if (!row_live(v)) {
			rc = -ENOENT;
			break;
		}
		/* A segment moved or being moved: a move (or whoever finishes
		 * a dead mover's) wakes its sleepers, after its state word
		 * says so. */
		if (seg_gone(h)) {
			rc = SHMT_ESTALE;
			break;
		}
		if ((rc = wait_try(h, v, client, len, cost, buf, &d)) != 0)
			break;
		now = shmt__mono_ns();
		if (now >= deadline)
			break;
		/* A refusal names its retry time; one that does not (none
		 * does, but the segment is not trusted) is retried in 1 ms
		 * rather than slept through. */
		sleep = d.retry_after_ns != 0 ? d.retry_after_ns : 1000000;
		if (sleep > deadline - now)
			sleep = deadline - now;
		/* A timeout beyond a day is slept a day at a time. */
		if (sleep > 86400000000000ULL)
			sleep = 86400000000000ULL;
		if ((rc = wake_sleep(h, wake, seen, sleep)) != 0)
			break;
		rc = row_live(v) ? wait_try(h, v, client, len, cost, buf, &d) :
		    -ENOENT;
	}
	if (out != NULL && rc >= 0)
		*out = d;
	return rc;
}

/* The deadline of a wait of TIMEOUT_NS from now: 0 for none (one try). */
static uint64_t
wait_deadline(uint64_t timeout_ns)
{
	return timeout_ns == 0 ? 0 : sat_add(shmt__mono_ns(), timeout_ns);
}

static int
gen_wait_once(shmt_t *h, const char *name, const void *client, size_t client_len,
    uint64_t cost, uint64_t deadline, shmt_decision_t *out)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	int rc;

	if ((rc = shmt__decide_find(h, name, client, client_len, cost, &scratch,
	    &v)) != 0)
		return rc;
	return wait_loop(h, v, client, client_len, cost, deadline, NULL, out);
}

SHMT_EXPORT int
shmt_wait(shmt_t *h, const char *name, const void *client, size_t client_len,
    uint64_t cost, uint64_t timeout_ns, shmt_decision_t *out)
{
	uint64_t deadline = wait_deadline(timeout_ns);

	SHMT_GEN_CALL(h, gen_wait_once(h, name, client, client_len, cost, deadline, out));
}

static int
gen_next_key_wait_once(shmt_t *h, const char *name, char *buf, size_t cap,
    uint64_t deadline, shmt_decision_t *out)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	int rc;

	if (buf == NULL && cap != 0)
		return -EINVAL;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0 ||
	    (rc = shmt__keys_check(v, buf, cap)) != 0)
		return rc;
	return wait_loop(h, v, NULL, 0, 1, deadline, buf, out);
}

SHMT_EXPORT int
shmt_next_key_wait(shmt_t *h, const char *name, char *buf, size_t cap,
    uint64_t timeout_ns, shmt_decision_t *out)
{
	uint64_t deadline = wait_deadline(timeout_ns);

	SHMT_GEN_CALL(h, gen_next_key_wait_once(h, name, buf, cap, deadline, out));
}
