/* SPDX-License-Identifier: MIT */
/*
 * One variant of the read side that libshmthrottle could put around each
 * call on its segment, built as a shared object the way the library is
 * (-fPIC, hidden visibility, liburcu's read-side functions inlined with
 * _LGPL_SOURCE).  bench/CMakeLists.txt builds one object per flavour and
 * TLS dialect; bench/rcucost.c loads each and times rcucost_loop.
 *
 * RCUCOST_FLAVOUR:
 *   0 none      the call without a read side (the baseline subtracted);
 *   1 memb      urcu-memb, registered lazily: the test of registration is
 *               liburcu's own per-thread reader record (one TLS address
 *               for the test, the lock and the unlock);
 *   2 memb-flag urcu-memb, registered lazily on a flag of ours in a
 *               per-thread struct of this object (a second TLS address);
 *   3 bp        urcu-bp (registers itself on first use);
 *   4 qsbr      urcu-qsbr, the call itself a quiescent state (the read
 *               lock costs nothing; every entry reports the thread
 *               quiescent), registered lazily;
 *   5 memb-one  as memb, with one TLS lookup per call: liburcu's inline
 *               read side names the reader record with URCU_TLS(), which
 *               is redefined here to go through a const function of this
 *               object, so the compiler computes the address once per
 *               call where it would otherwise look it up at every access
 *               (each a call through a TLS descriptor, or __tls_get_addr);
 *   6 qsbr-one  as qsbr, likewise.
 */
#define _LGPL_SOURCE 1
#include <pthread.h>
#include <stdint.h>

#if RCUCOST_FLAVOUR == 5 || RCUCOST_FLAVOUR == 6
#include <urcu/tls-compat.h>
#include <urcu/static/urcu-common.h>
#if RCUCOST_FLAVOUR == 5
#define RCU_READER urcu_memb_reader
#define RCU_READER_T struct urcu_reader
#else
struct urcu_qsbr_reader;
#define RCU_READER urcu_qsbr_reader
#define RCU_READER_T struct urcu_qsbr_reader
#endif
extern __thread RCU_READER_T RCU_READER;
/* The reader record's address: const, so computed once per call. */
__attribute__((const, noinline)) static RCU_READER_T *
reader_addr(void)
{
	return &RCU_READER;
}
#undef URCU_TLS
#define URCU_TLS(name) (*reader_addr())
#endif

#if RCUCOST_FLAVOUR == 1 || RCUCOST_FLAVOUR == 2 || RCUCOST_FLAVOUR == 5
#include <urcu/urcu-memb.h>
#elif RCUCOST_FLAVOUR == 3
#include <urcu/urcu-bp.h>
#elif RCUCOST_FLAVOUR == 4 || RCUCOST_FLAVOUR == 6
#include <urcu/urcu-qsbr.h>
#elif RCUCOST_FLAVOUR != 0
#error "RCUCOST_FLAVOUR: 0 to 6"
#endif
#include <urcu/pointer.h>

#define EXPORT __attribute__((visibility("default")))

struct obj {
	uint64_t v;
};

static struct obj one = { 1 };
static struct obj *cur = &one;

#if RCUCOST_FLAVOUR == 2
static __thread struct tstate {
	int registered;
	uint64_t calls;
} ts;
#endif

__attribute__((noinline, unused)) static void
slow_register(void)
{
#if RCUCOST_FLAVOUR == 1 || RCUCOST_FLAVOUR == 5
	urcu_memb_register_thread();
#elif RCUCOST_FLAVOUR == 2
	urcu_memb_register_thread();
	ts.registered = 1;
#elif RCUCOST_FLAVOUR == 4 || RCUCOST_FLAVOUR == 6
	urcu_qsbr_register_thread();
#endif
}

/* One call: enter, read through the published pointer, leave. */
__attribute__((noinline)) static uint64_t
one_call(void)
{
	struct obj *p;
	uint64_t v;

#if RCUCOST_FLAVOUR == 1 || RCUCOST_FLAVOUR == 5
	if (__builtin_expect(!URCU_TLS(urcu_memb_reader).registered, 0))
		slow_register();
	_urcu_memb_read_lock();
#elif RCUCOST_FLAVOUR == 2
	if (__builtin_expect(!ts.registered, 0))
		slow_register();
	ts.calls++;
	_urcu_memb_read_lock();
#elif RCUCOST_FLAVOUR == 3
	_urcu_bp_read_lock();
#elif RCUCOST_FLAVOUR == 4 || RCUCOST_FLAVOUR == 6
	if (__builtin_expect(!URCU_TLS(urcu_qsbr_reader).registered, 0))
		slow_register();
	_urcu_qsbr_quiescent_state();
#endif
	p = rcu_dereference(cur);
	v = p->v;
#if RCUCOST_FLAVOUR == 1 || RCUCOST_FLAVOUR == 2 || RCUCOST_FLAVOUR == 5
	_urcu_memb_read_unlock();
#elif RCUCOST_FLAVOUR == 3
	_urcu_bp_read_unlock();
#endif
	return v;
}

EXPORT uint64_t rcucost_loop(uint64_t n);
EXPORT const char *rcucost_name(void);

EXPORT uint64_t
rcucost_loop(uint64_t n)
{
	uint64_t sum = 0;

	for (uint64_t i = 0; i < n; i++)
		sum += one_call();
	return sum;
}

EXPORT const char *
rcucost_name(void)
{
	static const char *names[] = { "none", "memb", "memb-flag", "bp",
	    "qsbr", "memb-one", "qsbr-one" };

	return names[RCUCOST_FLAVOUR];
}
