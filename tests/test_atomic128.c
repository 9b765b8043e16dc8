/* SPDX-License-Identifier: MIT */
/*
 * The 16-byte load of shared words (lib/atomic128.h) is atomic between
 * processes, on both of its paths: the aligned SSE load where the CPU has
 * AVX, and the locked cmpxchg16b ($SHMT_ATOMIC16=cas, or a CPU without AVX).
 * A forked writer moves a word in a MAP_SHARED page through values whose
 * two halves are equal, (k, k) -> (k + 1, k + 1), by CAS, while a forked
 * reader loads it and fails on any pair with unequal halves (a torn read)
 * or a value that goes back; the two are put on two CPUs where there are
 * two, so that they run at once.  Words on one line and on the next line
 * are both tried.  The reader prints how many of its loads saw a change:
 * the contention the run had (a load of two 8-byte halves in place of
 * either path tore in each of 10 runs on a 2-CPU machine).
 */
#include "testutil.h"

#include "atomic128.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define AT_WRITERS 1
#define AT_READERS 1
#define AT_STEPS 1000000U    /* CAS successes per writer */

struct at_shared {
	uint64_t go;
	uint64_t done;
	uint64_t ready;          /* readers looping: the writers start then */
	uint64_t pad[5];
	uint64_t w[8][2] __attribute__((aligned(64)));
};

/* Put this process on the Nth CPU it may use (N modulo their count), so
 * that a writer and a reader run at once where there are two. */
static void
at_pin(int n)
{
	cpu_set_t set, one;
	int k = 0, count;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return;
	count = CPU_COUNT(&set);
	if (count < 2)
		return;
	n %= count;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &set))
			continue;
		if (k++ == n) {
			CPU_ZERO(&one);
			CPU_SET(c, &one);
			(void)sched_setaffinity(0, sizeof(one), &one);
			return;
		}
	}
}

static void
at_writer(struct at_shared *s, int slot)
{
	uint64_t *w = s->w[slot];

	while (__atomic_load_n(&s->go, __ATOMIC_ACQUIRE) == 0 ||
	    __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) < AT_READERS)
		;
	for (uint32_t n = 0; n < AT_STEPS; n++) {
		uint64_t cur[2], nw[2];

		shmt__load128(w, cur);
		do {
			nw[0] = cur[0] + 1;
			nw[1] = cur[1] + 1;
		} while (!shmt__cas128(w, cur, nw));
	}
	_exit(0);
}

static void
at_reader(struct at_shared *s, int slot)
{
	uint64_t *w = s->w[slot], last = 0, changes = 0, loads = 0;

	while (__atomic_load_n(&s->go, __ATOMIC_ACQUIRE) == 0)
		;
	__atomic_fetch_add(&s->ready, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&s->done, __ATOMIC_ACQUIRE) == 0) {
		uint64_t v[2];

		shmt__load128(w, v);
		loads++;
		if (v[0] != v[1] || v[0] < last) {
			printf("# torn or backwards: %" PRIu64 " %" PRIu64
			    " after %" PRIu64 "\n", v[0], v[1], last);
			fflush(stdout);
			_exit(1);
		}
		changes += v[0] != last;
		last = v[0];
	}
	printf("# reader of word %d: %" PRIu64 " loads, %" PRIu64
	    " saw a change\n", slot, loads, changes);
	fflush(stdout);
	_exit(0);
}

static void
at_run(int sse)
{
	struct at_shared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t wr[AT_WRITERS], rd[AT_READERS];
	int status;

	assert_true(s != MAP_FAILED);
	memset(s, 0, sizeof(*s));
#if defined(__x86_64__)
	shmt__atomic16_sse = sse;
#else
	(void)sse;
#endif
	/* Word 3 shares its line with word 2; word 4 starts the next. */
	for (int slot = 3; slot <= 4; slot++) {
		s->go = 0;
		s->done = 0;
		s->ready = 0;
		for (int i = 0; i < AT_WRITERS; i++) {
			wr[i] = fork();
			assert_true(wr[i] >= 0);
			if (wr[i] == 0) {
				at_pin(2 * i);
				at_writer(s, slot);
			}
		}
		for (int i = 0; i < AT_READERS; i++) {
			rd[i] = fork();
			assert_true(rd[i] >= 0);
			if (rd[i] == 0) {
				at_pin(2 * i + 1);
				at_reader(s, slot);
			}
		}
		__atomic_store_n(&s->go, 1, __ATOMIC_RELEASE);
		for (int i = 0; i < AT_WRITERS; i++) {
			assert_int_equal(waitpid(wr[i], &status, 0), wr[i]);
			assert_true(WIFEXITED(status) &&
			    WEXITSTATUS(status) == 0);
		}
		__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
		for (int i = 0; i < AT_READERS; i++) {
			assert_int_equal(waitpid(rd[i], &status, 0), rd[i]);
			assert_true(WIFEXITED(status) &&
			    WEXITSTATUS(status) == 0);
		}
		assert_int_equal(s->w[slot][0],
		    (uint64_t)AT_WRITERS * AT_STEPS);
		assert_int_equal(s->w[slot][1],
		    (uint64_t)AT_WRITERS * AT_STEPS);
	}
	munmap(s, sizeof(*s));
}

#if defined(__x86_64__)
/* The load this process chose: the SSE one exactly where the CPU has AVX
 * and $SHMT_ATOMIC16 is not "cas". */
static void
test_choice(void **state)
{
	const char *e = getenv("SHMT_ATOMIC16");
	int want;

	(void)state;
	__builtin_cpu_init();
	want = __builtin_cpu_supports("avx") &&
	    (e == NULL || strcmp(e, "cas") != 0);
	printf("# AVX %d, SHMT_ATOMIC16 %s: %s load\n",
	    __builtin_cpu_supports("avx") != 0, e != NULL ? e : "(unset)",
	    shmt__atomic16_sse ? "SSE" : "locked");
	assert_int_equal(shmt__atomic16_sse, want);
}

static void
test_locked(void **state)
{
	int keep = shmt__atomic16_sse;

	(void)state;
	at_run(0);
	shmt__atomic16_sse = keep;
}

static void
test_sse(void **state)
{
	int keep = shmt__atomic16_sse;

	(void)state;
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx")) {
		printf("# no AVX: the SSE load is never used here\n");
		skip();
	}
	at_run(1);
	shmt__atomic16_sse = keep;
}

#else
/* Elsewhere one path: GCC's __atomic 16-byte load. */
static void
test_generic(void **state)
{
	(void)state;
	at_run(0);
}
#endif

int
main(void)
{
	const struct CMUnitTest tests[] = {
#if defined(__x86_64__)
		cmocka_unit_test(test_choice),
		cmocka_unit_test(test_locked),
		cmocka_unit_test(test_sse),
#else
		cmocka_unit_test(test_generic),
#endif
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
