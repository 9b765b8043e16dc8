/* SPDX-License-Identifier: MIT */
/*
 * The hot-key analyzer fed by forked writers, each with a stripe of its
 * own, while this process queries.  Time is an injected clock in shared
 * memory; the parent moves it to a random moment of each tenth of a
 * sub-window, writes each writer's requests for that moment (a hot key over
 * the threshold, a hot key that moves every three sub-windows, keys aimed
 * at the hot key's counter group, one-off keys) into shared memory, lets
 * the writers run them, and logs them as its own exact model.  Every answer
 * (both sides of every sub-window edge, and a random moment of each) is
 * checked against the exact last window (test_analyzer_util.c): bounds
 * holding the true count, no key over the threshold of the exact window
 * missing, every answer certified, each listed key over threshold x
 * total_window - error_window less its requests in the oldest sub-window
 * before the window, and on the default geometry none below threshold x
 * total_window - error_window.
 */
#include "test_analyzer_util.h"

#include "analyzer.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MP_WRITERS 3
#define MP_MAX 4096             /* requests per writer and moment */
#define MP_STEPS 10             /* moments per sub-window */

struct mp_shared {
	struct tu_clock clk;
	_Atomic uint64_t go;            /* the moment to run (1, 2, ...) */
	_Atomic uint64_t done[MP_WRITERS];
	_Atomic int stop;
	uint32_t n[MP_WRITERS];
	uint32_t ids[MP_WRITERS][MP_MAX];
};

static struct mp_shared *mp;
static uint64_t mp_seed;

static void
mp_writer(int w, const char *seg)
{
	uint64_t seen = 0;
	char key[96], v[16];
	size_t vlen;
	shmt_t *h;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1)
		_exit(4);
	if (shmt_open(seg, &h) != 0 || shmt_set_clock(h, tu_clock_read,
	    &mp->clk) != 0)
		_exit(2);
	for (;;) {
		uint64_t go;

		while ((go = atomic_load(&mp->go)) == seen &&
		    !atomic_load(&mp->stop))
			sched_yield();
		if (atomic_load(&mp->stop))
			break;
		for (uint32_t j = 0; j < mp->n[w]; j++) {
			size_t kl = ta_key(mp->ids[w][j], key);
			int rc = shmt_get(h, key, kl, v, sizeof(v), &vlen);

			if (rc != 0 && rc != -ENOENT)
				_exit(3);
		}
		seen = go;
		atomic_store(&mp->done[w], go);
	}
	shmt_close(h);
	_exit(0);
}

/* Append request (T, ID) to the model's log (the writers ran it). */
static void
mp_log(struct ta_run *r, uint64_t t, uint32_t id)
{
	if (r->n == r->cap) {
		r->cap *= 2;
		r->req = realloc(r->req, r->cap * sizeof(*r->req));
		assert_non_null(r->req);
	}
	r->req[r->n].t = t;
	r->req[r->n++].id = id;
}

static void
mp_run(const struct ta_conf *c, uint64_t seed)
{
	double sc = ta_scale();
	uint64_t per = (uint64_t)(1200.0 * (sc < 1 ? sc : 1)) / MP_STEPS, t;
	pid_t pid[MP_WRITERS];
	uint32_t aim[160], naim;
	struct ta_run r;
	uint64_t go = 0;

	if (per < 40)
		per = 40;
	ta_open(&r, c, "forked writers", TA_SEC, seed);
	r.writers = MP_WRITERS;
	r.must_certify = 1;
	naim = ta_collide(r.counters / r.probe, TA_COLD, TA_NOISE, aim, 160);
	assert_true(naim > 8);
	t = TA_SEC + tu_rand(&r.rs) % (100ULL * 86400 * TA_SEC);
	t = (t / r.w + 1) * r.w;
	r.clk.now = t;
	r.next_rand_q = t;
	memset(mp, 0, sizeof(*mp));
	for (int w = 0; w < MP_WRITERS; w++) {
		pid[w] = fork();
		assert_true(pid[w] >= 0);
		if (pid[w] == 0)
			mp_writer(w, r.seg);
	}
	for (uint32_t s = 0; s < 3 * c->subw; s++) {
		uint32_t moving = 20 + s / 3;

		for (uint32_t k = 0; k < MP_STEPS; k++) {
			uint64_t at = t + s * r.w + k * (r.w / MP_STEPS) +
			    tu_rand(&r.rs) % (r.w / MP_STEPS);

			ta_advance(&r, at);
			mp->clk.now = at;
			for (int w = 0; w < MP_WRITERS; w++) {
				mp->n[w] = (uint32_t)(per / MP_WRITERS);
				for (uint32_t j = 0; j < mp->n[w]; j++) {
					uint64_t u = tu_rand(&r.rs) % 100;
					uint32_t id;

					if (u < (uint64_t)c->ppm / 10000 + 2)
						id = aim[0];    /* the hot key */
					else if (u < 25)
						id = moving;
					else if (u < 45)        /* its group */
						id = aim[1 + tu_rand(&r.rs) %
						    (naim - 1)];
					else
						id = r.noise_next++;
					mp->ids[w][j] = id;
					mp_log(&r, at, id);
				}
			}
			atomic_store(&mp->go, ++go);
			for (int w = 0; w < MP_WRITERS; w++)
				while (atomic_load(&mp->done[w]) != go)
					sched_yield();
		}
	}
	ta_advance(&r, t + 3 * c->subw * r.w);
	atomic_store(&mp->stop, 1);
	for (int w = 0; w < MP_WRITERS; w++) {
		int st;

		assert_int_equal(waitpid(pid[w], &st, 0), pid[w]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	assert_true(r.queries > 0 && r.must_report_win > 0);
	assert_int_equal(r.missed, 0);
	assert_int_equal(r.certified, r.queries);
	/* The default geometry: the moving key's part before the window in
	 * the oldest sub-window (a twelfth of its three sub-windows) cannot
	 * bring it near the threshold, so nothing is listed below threshold
	 * x total_window - error_window.  Elsewhere (6 sub-windows, 5%) it
	 * can: the oldest sub-window's corner, counted and printed. */
	if (c == &ta_confs[0])
		assert_int_equal(r.fp, 0);
	ta_close(&r);
}

static void
test_forked(void **state)
{
	(void)state;
	for (size_t i = 0; i < ta_nconfs; i++)
		mp_run(&ta_confs[i], mp_seed + i);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forked),
	};

	mp = mmap(NULL, sizeof(*mp), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mp == MAP_FAILED)
		return 1;
	mp_seed = tu_seed("test_analyzer_mp");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
