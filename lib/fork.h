/*
 * fork.h: handles carried across fork() (fork.c).
 *
 * A pthread_atfork child handler bumps a process-wide fork generation; each
 * handle remembers the generation it was attached in.  The entry points
 * compare the two (two loads, no system call) and, on a mismatch, give the
 * handle the child's own process slot before going on.
 */
#ifndef SHMT_FORK_H
#define SHMT_FORK_H

#include "rcu.h"
#include "segment.h"

extern unsigned shmt__fork_generation;

/* At attach: register the atfork handler (once) and stamp H. */
void shmt__fork_attach(shmt_t *h);
/* Slow path of SHMT_FORK_CHECK: SHMT_ESTALE when H's segment was retired
 * or moved (after waiting out a move in progress: -EAGAIN past the
 * bound), else reattach H in this process. */
int shmt__fork_reattach(shmt_t *h);

/* Also the one place a call learns that its segment was retired (the
 * header's sh_retired, set by shmt_unlink() or the daemon): a load of a
 * read-mostly line, and SHMT_ESTALE from then on. */
static inline int
shmt__fork_check(shmt_t *h)
{
	if (__builtin_expect(h != NULL &&
	    (__atomic_load_n(&h->fork_gen, __ATOMIC_ACQUIRE) !=
	    __atomic_load_n(&shmt__fork_generation, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&h->hdr->sh_retired, __ATOMIC_RELAXED) != 0), 0))
		return shmt__fork_reattach(h);
	return 0;
}

/* After a grant (RC 1) on H: the generation still LIVE (one load of the
 * line the entry check read), or the grant's fate once a move decides it
 * (move.c): 1 when it stands, SHMT_ESTALE or -EAGAIN when it is not
 * granted. */
int shmt__grant_moved(shmt_t *h);
static inline int
shmt__grant_check(shmt_t *h, int rc)
{
	if (__builtin_expect(rc == 1 && shmt__frozen_load(h) != 0, 0))
		return shmt__grant_moved(h);
	return rc;
}

/* Take the limiter table's lock, repaired after a dead holder, on a LIVE
 * segment (waiting out a move, move.c): 0, or an error (not held). */
int shmt__table_lock(shmt_t *h);

/* H (the newest handle of its chain) answered SHMT_ESTALE: when its
 * segment was MOVED, open the generation its name now holds and link it
 * as H's next (once per process); 0 when the call may be retried on
 * shmt__gen_live(H), else the error to report (SHMT_ESTALE: retired, not
 * moved; or shmt_open's error). */
int shmt__gen_follow(shmt_t *h);
/* Keep H (the newest handle of its chain) mapped until shmt_close(): it
 * is handed out (the daemon's adopted generation).  0, or -EAGAIN when H
 * is no longer the newest (follow again).  Inside a read-side section. */
int shmt__gen_pin(shmt_t *h);

/* The body of a public entry point on handle H: CALL on the newest
 * generation, again on the next one when it answers SHMT_ESTALE because
 * its segment moved.  Moves made back to back can move each generation
 * this call opens before the call lands: after SHMT_GEN_FOLLOW_MAX
 * follows the call gives up with -EAGAIN (the segment is being moved, not
 * removed: try again).  A follow that fails says why (SHMT_ESTALE only
 * when the segment was removed).  CALL must reach SHMT_FORK_CHECK (or a
 * lock, or a grant), which answers SHMT_ESTALE on a moved segment; the
 * straight path costs one load of H's own line and a read-side section
 * (rcu.h) around the whole: no generation it enters is unmapped before it
 * returns.  CALL appears once in the expansion, so the hot entry points
 * mark their body always_inline and are one function: a call level of its
 * own cost a named grant 9 to 15 instructions (its registers saved and
 * restored), a get and a set 17 and 31 (callgrind). */
#define SHMT_GEN_FOLLOW_MAX 32
#define SHMT_GEN_RUN(h, call, grc_) do { \
	(h) = shmt__gen_live(h); \
	for (int gt_ = 0;; gt_++) { \
		int frc_; \
		grc_ = (call); \
		if (__builtin_expect(grc_ != SHMT_ESTALE, 1)) \
			break; \
		if (gt_ == SHMT_GEN_FOLLOW_MAX) { \
			grc_ = -EAGAIN; \
			break; \
		} \
		if ((frc_ = shmt__gen_follow(h)) != 0) { \
			grc_ = frc_; \
			break; \
		} \
		(h) = shmt__gen_live(h); \
	} \
} while (0)
#define SHMT_GEN_CALL(h, call) do { \
	int grc_; \
	shmt__rcu_enter(); \
	SHMT_GEN_RUN(h, call, grc_); \
	shmt__name_paced(h); \
	shmt__rcu_leave(); \
	return grc_; \
} while (0)

/* The same for a call that only reads and checks nothing (statistics):
 * a moved segment is followed before the call. */
#define SHMT_GEN_READ(h, call) do { \
	int grc_; \
	shmt__rcu_enter(); \
	(h) = shmt__gen_live(h); \
	if ((h) != NULL && __atomic_load_n(&(h)->hdr->sh_retired, \
	    __ATOMIC_ACQUIRE) == SHMT_SEG_MOVED) \
		for (int gt_ = 0; gt_ < SHMT_GEN_FOLLOW_MAX && \
		    shmt__gen_follow(h) == 0; gt_++) \
			if (__atomic_load_n(&((h) = shmt__gen_live(h))->hdr-> \
			    sh_retired, __ATOMIC_ACQUIRE) != SHMT_SEG_MOVED) \
				break; \
	SHMT_GEN_RUN(h, call, grc_); \
	shmt__rcu_leave(); \
	return grc_; \
} while (0)

/* At the top of an entry point that returns an int error. */
#define SHMT_FORK_CHECK(h) do { int fork_rc_ = shmt__fork_check(h); \
	if (fork_rc_ != 0) return fork_rc_; } while (0)

#endif
