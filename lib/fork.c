/*
 * fork.c: a handle used in a child after fork() takes the child's own slot.
 *
 * fork() copies the handle with the parent's slot, pid and analyzer stripe
 * ownership.  The child handler below only bumps a counter (it runs in the
 * one thread of the new child, so anything more would be at risk).  The
 * next call on a handle stamped with an older generation claims a fresh
 * slot under the child's pid and restamps the handle; the parent's slot is
 * left to the parent.  Threads of the child that race on one handle
 * serialise on a mutex that the child handler reinitialises.
 */
#include "fork.h"

#include "env.h"

#include <errno.h>
#include <pthread.h>
#include <unistd.h>

unsigned shmt__fork_generation;

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t fork_mu = PTHREAD_MUTEX_INITIALIZER;

static void
fork_child(void)
{
	/* Another thread of the parent may have held it at the fork. */
	(void)pthread_mutex_init(&fork_mu, NULL);
	__atomic_add_fetch(&shmt__fork_generation, 1, __ATOMIC_RELEASE);
}

static void
fork_register(void)
{
	shmt__rcu_atfork();
	(void)pthread_atfork(NULL, NULL, fork_child);
}

void
shmt__fork_attach(shmt_t *h)
{
	(void)pthread_once(&fork_once, fork_register);
	h->fork_gen = __atomic_load_n(&shmt__fork_generation, __ATOMIC_ACQUIRE);
}

int
shmt__fork_reattach(shmt_t *h)
{
	unsigned gen = __atomic_load_n(&shmt__fork_generation, __ATOMIC_ACQUIRE);
	int rc = 0;

	if (__atomic_load_n(&h->hdr->sh_retired, __ATOMIC_ACQUIRE) != 0 &&
	    (rc = shmt__frozen_wait(h)) != 0)
		return rc;
	shmt__quiet_lock(&fork_mu);
	if (__atomic_load_n(&h->fork_gen, __ATOMIC_ACQUIRE) != gen) {
		/* The slot and pid were the parent's: never release them. */
		h->pid = shmt__env_pid();
		h->slot = UINT32_MAX;
		rc = shmt__slot_claim(h);
		if (rc == 0)
			__atomic_store_n(&h->fork_gen, gen, __ATOMIC_RELEASE);
	}
	shmt__quiet_unlock(&fork_mu);
	return rc;
}

/*
 * Following a move (move.c).  A handle whose segment moved gets the handle
 * of the next generation as gen_next, and every later call goes there
 * (SHMT_GEN_CALL).  The old mapping is not unmapped then: another thread
 * of this process may be inside a call on it (a grant parked between its
 * load of the word and its CAS, a reader copying a value).  Such a thread
 * only touches the old mapping until its call returns: its writes are
 * refused there (the segment is no longer LIVE, see move.c) and it
 * retries on the new one.  Every call runs inside a read-side section
 * (rcu.h), so a generation this process opened itself to follow a move is
 * unmapped after a grace period once the next one is linked (rcu.c): then
 * no thread is inside it, and none enters it again (every call walks the
 * chain to its end).  The handle the caller holds, and one handed out by
 * shmt__move_follow (pinned), stay mapped until shmt_close() of the
 * caller's handle, which by contract no other thread is using then: the
 * caller's own handle is read by calls that do not follow (statistics,
 * the daemon's own).  The cost: one old generation per handle the caller
 * opened, not one per move.
 */
int
shmt__gen_follow(shmt_t *h)
{
	uint32_t s = __atomic_load_n(&h->hdr->sh_retired, __ATOMIC_ACQUIRE);
	shmt_t *n = NULL;
	int rc = 0;

	if (s == SHMT_SEG_FROZEN) {
		rc = shmt__frozen_wait(h);
		if (rc != SHMT_ESTALE)
			return rc;
		s = __atomic_load_n(&h->hdr->sh_retired, __ATOMIC_ACQUIRE);
	}
	if (s == SHMT_SEG_LIVE)
		return 0;
	if (s != SHMT_SEG_MOVED)
		return SHMT_ESTALE;
	if (__atomic_load_n(&h->gen_next, __ATOMIC_ACQUIRE) != NULL)
		return 0;
	{
		shmt_open_opts_t o;

		/* The owner the caller trusted at open is trusted in every
		 * generation (a move keeps the object's owner, move.c).  The
		 * open may wait for a move of the next generation: outside
		 * fork_mu, with H's sleep hooks, and two threads may open it
		 * at once: the first to link its handle wins, the other
		 * closes its own. */
		shmt_open_opts_init(&o);
		o.owner = h->owner;
		if ((rc = shmt__open_hooked(h->name, &o, h, &n)) != 0)
			return rc;
	}
	shmt__quiet_lock(&fork_mu);
	if (__atomic_load_n(&h->gen_next, __ATOMIC_ACQUIRE) == NULL) {
		n->clock = h->clock;
		n->clock_ctx = h->clock_ctx;
		n->sleep_before = h->sleep_before;
		n->sleep_after = h->sleep_after;
		n->sleep_ctx = h->sleep_ctx;
		n->gen_owned = 1;
		__atomic_store_n(&h->gen_next, n, __ATOMIC_RELEASE);
		/* Calls that enter from now on go to N: H is left to those
		 * already inside it. */
		if (h->gen_owned && !h->gen_pinned)
			shmt__gen_reclaim(h);
		n = NULL;
	}
	shmt__quiet_unlock(&fork_mu);
	if (n != NULL)
		shmt_close(n);
	return 0;
}

int
shmt__gen_pin(shmt_t *h)
{
	int rc = 0;

	shmt__quiet_lock(&fork_mu);
	if (__atomic_load_n(&h->gen_next, __ATOMIC_ACQUIRE) != NULL)
		rc = -EAGAIN;
	else
		h->gen_pinned = 1;
	shmt__quiet_unlock(&fork_mu);
	return rc;
}
