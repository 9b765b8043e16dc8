/*
 * rcu.h: process-local read-copy-update of a moved generation's mapping
 * (liburcu's urcu-bp flavour; rcu.c).
 *
 * Every call on a segment runs inside a read-side section (SHMT_GEN_CALL,
 * fork.h; the limiter handles' calls, limiter.c): a generation's mapping
 * the library opened itself to follow a move is unmapped once the next
 * generation is linked and a grace period has passed, so never under a
 * thread still inside a call on it.
 *
 * Why urcu-bp: it needs no registration from the caller's threads (a
 * thread registers on its first section; liburcu unregisters it at thread
 * exit), its grace periods never wait for a thread that is not inside a
 * call (unlike QSBR), and its read side is a load of one per-thread
 * pointer and a store through it.  That pointer (liburcu-bp's only TLS,
 * 80 bytes in all) is reached with the initial-exec model below: one load
 * at a fixed offset from %fs, where x86-64's default dialect calls
 * __tls_get_addr at each of the four accesses of a section (bench/
 * rcucost.c measured 25 instructions and about 1 ns per section this way,
 * 84 and 10 ns the default way).  A program linked with the library has
 * liburcu-bp's TLS in its static TLS block; one that dlopens it (Python)
 * gets those 80 bytes from glibc's surplus kept for such libraries.
 */
#ifndef SHMT_RCU_H
#define SHMT_RCU_H

#include <urcu/static/urcu-bp.h>

/* Redeclared with the model its accesses from this library use. */
extern __thread struct urcu_bp_reader *urcu_bp_reader
    __attribute__((tls_model("initial-exec")));

struct shmt;

/* liburcu-bp places its per-thread records at addresses below the
 * alignment their type declares (128 bytes; harmless on x86-64), which
 * UBSan's alignment check stops at in every section: under ASan+UBSan
 * (the asan preset, the fuzz targets) the sections are taken out of line
 * in rcu.c, the one file built without that check. */
#if defined(__SANITIZE_ADDRESS__)
#define SHMT_RCU_OUT_OF_LINE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHMT_RCU_OUT_OF_LINE 1
#endif
#endif

/* Enter and leave a read-side section (nestable, never blocks). */
#ifdef SHMT_RCU_OUT_OF_LINE
void shmt__rcu_enter(void);
void shmt__rcu_leave(void);
#else
static inline void
shmt__rcu_enter(void)
{
	_urcu_bp_read_lock();
}

static inline void
shmt__rcu_leave(void)
{
	_urcu_bp_read_unlock();
}
#endif

/* OLD (a generation the library opened itself, its next one linked, not
 * pinned) will not be entered again: unmap it and close its object after
 * a grace period.  From then on OLD keeps only its process-local memory,
 * freed by shmt_close() of the first handle of its chain.  Takes over
 * OLD's mapping and descriptor; called with fork.c's mutex held. */
void shmt__gen_reclaim(struct shmt *old);
/* Wait until every reclaim asked before has run (tests; never inside a
 * read-side section). */
void shmt__gen_reclaim_wait(void);
/* The fork handlers of liburcu-bp and of the reclaim queue (registered
 * with fork.c's own, once). */
void shmt__rcu_atfork(void);

#endif
