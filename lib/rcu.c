/*
 * rcu.c: reclaim of the mappings of generations a process followed past
 * (see rcu.h for the read side, fork.c for the chain of generations).
 *
 * A reclaim record (the mapping's address and size, the descriptor: what
 * it releases, copied, so that it never touches the handle, whose
 * process-local memory lives on until shmt_close() of its chain) goes on
 * a queue.  One worker thread of the library, started by the first
 * reclaim, takes the queue in batches: a grace period (liburcu-bp's
 * synchronize_rcu), then munmap and close of each.  So neither the thread
 * that links the next generation (it is inside a read-side section itself)
 * nor any other caller ever waits for a grace period.
 *
 * fork(): the prepare handler takes liburcu-bp's locks
 * (urcu_bp_before_fork: so a fork made during a grace period waits for
 * it), then the queue's.  The child has no worker: the batch the parent's
 * worker held goes back on the child's queue (its grace period may not
 * hold in the child's view, and none of it was unmapped: the worker
 * unmaps under the lock), and the child's next reclaim starts a worker of
 * its own.  No thread is made at fork time.
 */
#include <urcu/urcu-bp.h>

#include "rcu.h"
#include "segment.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct reclaim {
	struct reclaim *next;
	void *base;
	uint64_t size;
	int fd;
};

static pthread_mutex_t rq_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rq_cv = PTHREAD_COND_INITIALIZER;
static struct reclaim *rq_pending;     /* queued, newest first */
static struct reclaim *rq_batch;       /* taken by the worker */
static uint64_t rq_queued, rq_done;    /* records queued and released */
static int rq_worker;                  /* a worker runs in this process */

/* Hooked sleeps in progress, and the worker's gate (segment.h). */
unsigned shmt__sleep_hooked;
int shmt__sleep_gate;

/* A grace period, once no thread is in a hooked sleep and with new ones
 * kept from running hooks (segment.h, "The sleep hooks"): the hooked
 * sleeps end by themselves (each is bounded, and needs nothing of this
 * thread), and then no thread inside a read-side section waits for a
 * runtime's lock that a forking thread may hold. */
static void
grace_period(void)
{
	__atomic_store_n(&shmt__sleep_gate, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&shmt__sleep_hooked, __ATOMIC_SEQ_CST) != 0)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	urcu_bp_synchronize_rcu();
	__atomic_store_n(&shmt__sleep_gate, 0, __ATOMIC_SEQ_CST);
}

static void *
reclaim_worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&rq_mu);
	for (;;) {
		struct reclaim *r, *next;
		uint64_t n = 0;

		while (rq_pending == NULL)
			pthread_cond_wait(&rq_cv, &rq_mu);
		rq_batch = rq_pending;
		rq_pending = NULL;
		pthread_mutex_unlock(&rq_mu);
		/* Every thread inside a call when the batch was queued has
		 * left it: none is inside these generations any more, and
		 * no call enters them again. */
		grace_period();
		pthread_mutex_lock(&rq_mu);
		for (r = rq_batch; r != NULL; r = next) {
			next = r->next;
			munmap(r->base, r->size);
			if (r->fd >= 0)
				close(r->fd);
			free(r);
			n++;
		}
		rq_batch = NULL;
		rq_done += n;
		pthread_cond_broadcast(&rq_cv);
	}
	return NULL;
}

/* Start the worker (RQ_MU held): 0, or -1 when no thread can be made
 * (the records wait on the queue for a later try). */
static int
worker_start(void)
{
	sigset_t all, old;
	pthread_attr_t at;
	pthread_t t;
	int rc;

	if (rq_worker)
		return 0;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &at, reclaim_worker, NULL);
	pthread_attr_destroy(&at);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return -1;
	rq_worker = 1;
	return 0;
}

#ifdef SHMT_RCU_OUT_OF_LINE
void
shmt__rcu_enter(void)
{
	_urcu_bp_read_lock();
}

void
shmt__rcu_leave(void)
{
	_urcu_bp_read_unlock();
}
#endif

void
shmt__gen_reclaim(struct shmt *old)
{
	struct reclaim *r = malloc(sizeof(*r));

	if (r == NULL)
		return;         /* kept until shmt_close(), as before */
	r->base = old->base;
	r->size = old->size;
	r->fd = old->fd;
	old->gen_reclaimed = 1;
	pthread_mutex_lock(&rq_mu);
	r->next = rq_pending;
	rq_pending = r;
	rq_queued++;
	(void)worker_start();
	pthread_cond_broadcast(&rq_cv);
	pthread_mutex_unlock(&rq_mu);
}

void
shmt__gen_reclaim_wait(void)
{
	uint64_t want;

	pthread_mutex_lock(&rq_mu);
	want = rq_queued;
	while (rq_done < want && worker_start() == 0)
		pthread_cond_wait(&rq_cv, &rq_mu);
	pthread_mutex_unlock(&rq_mu);
}

/* liburcu-bp's locks first: waiting there for a grace period must not
 * hold the queue's lock, which a thread inside a call may be waiting for
 * (it queues a reclaim from inside its read-side section). */
static void
before_fork(void)
{
	urcu_bp_before_fork();
	pthread_mutex_lock(&rq_mu);
}

static void
after_fork_parent(void)
{
	pthread_mutex_unlock(&rq_mu);
	urcu_bp_after_fork_parent();
}

static void
after_fork_child(void)
{
	/* The parent's worker is not here: its batch waits again. */
	if (rq_batch != NULL) {
		struct reclaim *r = rq_batch;

		while (r->next != NULL)
			r = r->next;
		r->next = rq_pending;
		rq_pending = rq_batch;
		rq_batch = NULL;
	}
	rq_worker = 0;
	/* The forking thread is the child's only one: nothing sleeps, and no
	 * worker waits. */
	__atomic_store_n(&shmt__sleep_hooked, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&shmt__sleep_gate, 0, __ATOMIC_RELAXED);
	/* The parent's worker may have been waiting on it. */
	(void)pthread_cond_init(&rq_cv, NULL);
	pthread_mutex_unlock(&rq_mu);
	urcu_bp_after_fork_child();
}

void
shmt__rcu_atfork(void)
{
	(void)pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
