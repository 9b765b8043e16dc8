/*
 * rcu.c: reclaim of the mappings of generations a process followed past
 * (see rcu.h for the read side, fork.c for the chain of generations).
 *
 * The grace period is waited for by liburcu's call_rcu worker thread, so
 * neither the thread that links the next generation (it is inside a
 * read-side section itself) nor any other caller ever waits for one.  The
 * callback owns a copy of what it releases (the mapping's address and
 * size, the descriptor): it never touches the handle, whose process-local
 * memory lives on until shmt_close() of its chain.
 */
/* liburcu-bp's functions, by their own names (urcu_bp_call_rcu...). */
#include <urcu/urcu-bp.h>

#include "rcu.h"
#include "segment.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

struct reclaim {
	struct rcu_head head;
	void *base;
	uint64_t size;
	int fd;
};

static void
reclaim_run(struct rcu_head *head)
{
	struct reclaim *r = caa_container_of(head, struct reclaim, head);

	munmap(r->base, r->size);
	if (r->fd >= 0)
		close(r->fd);
	free(r);
}

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
	urcu_bp_call_rcu(&r->head, reclaim_run);
}

void
shmt__gen_reclaim_wait(void)
{
	urcu_bp_barrier();
}

/* Around fork(): liburcu-bp's registry and grace-period locks, and its
 * call_rcu worker (paused in the parent, made again in the child). */
static void
before_fork(void)
{
	urcu_bp_call_rcu_before_fork();
	urcu_bp_before_fork();
}

static void
after_fork_parent(void)
{
	urcu_bp_after_fork_parent();
	urcu_bp_call_rcu_after_fork_parent();
}

static void
after_fork_child(void)
{
	urcu_bp_after_fork_child();
	urcu_bp_call_rcu_after_fork_child();
}

void
shmt__rcu_atfork(void)
{
	(void)pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
