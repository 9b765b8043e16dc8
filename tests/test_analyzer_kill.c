/* SPDX-License-Identifier: MIT */
/*
 * The analyzer under forked writers killed with SIGKILL.  Each writer opens
 * the segment itself and requests a known stream of keys (two hot, a cold
 * pool), and logs each request in a shared log only after shmt_get has
 * returned.  Time is a shared injected clock that the parent moves half a
 * sub-window per phase; in a phase every live writer does its quota, and in
 * about half the phases the parent kills one writer at a random point of
 * its quota and starts another in its seat, which carries the stream on.
 * After every phase the parent checks shmt_top_keys against the logs: with
 * K kills in the span (each may leave one request counted or not), the
 * total lies in [logged, logged + K], every key with more than the
 * threshold of the exact window's logged + K requests is listed when the
 * answer is certified, and each listed key's bounds (over the exact
 * window) contain its logged count in the exact window within K.
 */
#include "test_analyzer_util.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AK_WRITERS 4
#define AK_QUOTA 1000.0         /* requests per writer and phase, scaled */
#define AK_WINDOWS 3
#define AK_ALARM 240            /* turns a hang into a failure */
#define AK_WAIT_NS (120ULL * TA_SEC)

struct ak_log {
	uint32_t target;        /* quota x (phase + 1): tells the phase */
	uint32_t id;
};

struct ak_shared {
	_Atomic uint64_t clock;
	atomic_int stop;
	_Atomic uint64_t target[AK_WRITERS];
	_Atomic uint64_t done[AK_WRITERS];
};

static struct ak_shared *ak;
static struct ak_log *ak_logs;   /* [AK_WRITERS][ak_max] */
static uint64_t ak_max, ak_seed;
static char ak_seg[96];

static uint64_t
ak_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	return x ^ (x >> 33);
}

/* The J-th key of seat S's stream: 20% key 0, 12% key 1, the rest a pool
 * of 500. */
static uint32_t
ak_key(uint32_t s, uint64_t j)
{
	uint64_t u = ak_mix(ak_seed ^ ((uint64_t)s << 56) ^ (j * 2 + 1));

	return u % 100 < 20 ? 0 : u % 100 < 32 ? 1 :
	    TA_COLD + (uint32_t)((u >> 8) % 500);
}

static shmt_time_t
ak_clock(void *ctx)
{
	(void)ctx;
	return atomic_load(&ak->clock);
}

static uint64_t
ak_wall(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * TA_SEC + (uint64_t)ts.tv_nsec;
}

static void
ak_writer(uint32_t s)
{
	char key[96], v[8];
	shmt_t *h;
	size_t vlen;

	alarm(AK_ALARM);
	if (shmt_open(ak_seg, &h) != 0 ||
	    shmt_set_clock(h, ak_clock, NULL) != 0)
		_exit(2);
	while (!atomic_load(&ak->stop)) {
		uint64_t j = atomic_load(&ak->done[s]);
		size_t kl;
		int rc;

		if (j >= atomic_load(&ak->target[s])) {
			sched_yield();
			continue;
		}
		kl = ta_key(ak_key(s, j), key);
		rc = shmt_get(h, key, kl, v, sizeof(v), &vlen);
		if (rc != 0 && rc != -ENOENT)
			_exit(3);
		/* Logged only now that the get has returned. */
		ak_logs[s * ak_max + j].target =
		    (uint32_t)atomic_load(&ak->target[s]);
		ak_logs[s * ak_max + j].id = ak_key(s, j);
		atomic_store(&ak->done[s], j + 1);
	}
	shmt_close(h);
	_exit(0);
}

static pid_t
ak_start(uint32_t s)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		ak_writer(s);
	return pid;
}

/* Check the answer at the phase's end against the logs. */
static void
ak_check(shmt_t *h, uint64_t w, uint64_t t0, uint32_t ppm,
    const uint32_t *kill_phase, uint32_t nkills, uint64_t quota, uint32_t *hot)
{
	static uint32_t cnt[TA_IDS];
	shmt_hotkey_t out[64];
	shmt_top_info_t info;
	uint64_t n = 0, K = 0, nw = 0, Kw = 0, now = atomic_load(&ak->clock);
	uint64_t ws;
	uint8_t seen[TA_IDS / 8] = { 0 };
	int rc;

	rc = shmt_top_keys(h, out, 64, &info);
	assert_true(rc >= 0 && rc <= 64);
	memset(cnt, 0, sizeof(cnt));
	ws = now >= info.window_ns ? now - info.window_ns : 0;
	for (uint32_t s = 0; s < AK_WRITERS; s++) {
		uint64_t d = atomic_load(&ak->done[s]);

		for (uint64_t j = 0; j < d; j++) {
			const struct ak_log *l = &ak_logs[s * ak_max + j];
			uint64_t t = t0 + (l->target / quota - 1) * (w / 2);

			n += t >= info.span_start_ns && t <= now;
			if (t >= ws && t <= now) {
				cnt[l->id]++;
				nw++;
			}
		}
	}
	for (uint32_t k = 0; k < nkills; k++) {
		uint64_t t = t0 + kill_phase[k] * (w / 2);

		K += t >= info.span_start_ns && t <= now;
		Kw += t >= ws && t <= now;
	}
	/* The traffic is steady: every answer is certified. */
	if (!info.certified || info.total < n || info.total > n + K ||
	    info.error * (info.probe + 1) > info.total) {
		printf("# at %" PRIu64 ": total %" PRIu64 ", logged %" PRIu64
		    ", kills in the span %" PRIu64 ", error %" PRIu64
		    ", certified %d\n", now, info.total, n, K, info.error,
		    info.certified);
		fail();
	}
	for (int k = 0; k < rc; k++) {
		long id = ta_id_of(out[k].hash);

		if (id < 0 || out[k].lower > cnt[id] + Kw ||
		    out[k].upper < cnt[id]) {
			printf("# at %" PRIu64 ": key %ld listed with [%" PRIu64
			    ", %" PRIu64 "], logged %u in the exact window, "
			    "kills in it %" PRIu64 "\n", now, id, out[k].lower,
			    out[k].upper, id < 0 ? 0 : cnt[id], Kw);
			fail();
		}
		seen[id / 8] |= (uint8_t)(1 << (id % 8));
	}
	for (uint32_t id = 0; id < TA_IDS; id++)
		if ((double)cnt[id] * 1e6 > (double)ppm * (double)(nw + Kw)) {
			(*hot)++;
			if (info.certified && !(seen[id / 8] & (1 << (id % 8)))) {
				printf("# at %" PRIu64 ": key %u missed: %u of %"
				    PRIu64 " logged in the exact window, %" PRIu64
				    " kills\n", now, id, cnt[id], nw, Kw);
				fail();
			}
		}
}

static void
test_kill(void **state)
{
	uint64_t quota = (uint64_t)(AK_QUOTA * ta_scale()), rs, w, t0;
	uint32_t phases, nkills = 0, *kill_phase, hot = 0;
	pid_t pid[AK_WRITERS];
	shmt_top_info_t info;
	shmt_config_t cfg;
	shmt_t *h;

	(void)state;
	rs = ak_seed = tu_seed("test_analyzer_kill");
	if (quota < 200)
		quota = 200;
	ak = mmap(NULL, sizeof(*ak), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(ak != MAP_FAILED);
	memset(ak, 0, sizeof(*ak));
	shmt_config_init(&cfg);
	cfg.dict_bytes = 4ULL << 20;
	cfg.dict_shards = 2;
	tu_segname(ak_seg, sizeof(ak_seg), "ankill");
	assert_int_equal(shmt_create(ak_seg, &cfg, &h), 0);
	/* Which keys share a counter group follows the seed too, before the
	 * hashes are learnt and the writers open the segment: its own
	 * stream, so the kills drawn stay as they were. */
	{
		uint64_t ss = ak_seed ^ 0x9e3779b97f4a7c15ULL;

		tu_secret(h, &ss);
	}
	assert_int_equal(shmt_set_clock(h, ak_clock, NULL), 0);
	ta_learn(h);               /* the hashes, before forking */
	assert_true(shmt_top_keys(h, NULL, 0, &info) == 0);
	w = info.subwindow_ns;
	phases = AK_WINDOWS * cfg.analyzer_subwindows * 2;
	ak_max = quota * phases;
	ak_logs = mmap(NULL, AK_WRITERS * ak_max * sizeof(*ak_logs),
	    PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(ak_logs != MAP_FAILED);
	kill_phase = calloc(phases, sizeof(*kill_phase));
	assert_non_null(kill_phase);
	t0 = (5 * 86400 * TA_SEC / w) * w;
	atomic_store(&ak->clock, t0);
	for (uint32_t s = 0; s < AK_WRITERS; s++)
		pid[s] = ak_start(s);
	for (uint32_t p = 0; p < phases; p++) {
		uint64_t deadline = ak_wall() + AK_WAIT_NS;

		atomic_store(&ak->clock, t0 + p * (w / 2));
		for (uint32_t s = 0; s < AK_WRITERS; s++)
			atomic_store(&ak->target[s], quota * (p + 1));
		if (tu_rand(&rs) % 2 == 0) {
			uint32_t s = (uint32_t)(tu_rand(&rs) % AK_WRITERS);
			uint64_t at = quota * p + tu_rand(&rs) % quota;
			int st;

			while (atomic_load(&ak->done[s]) < at)
				assert_true(ak_wall() < deadline);
			assert_int_equal(kill(pid[s], SIGKILL), 0);
			assert_int_equal(waitpid(pid[s], &st, 0), pid[s]);
			assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
			kill_phase[nkills++] = p;
			pid[s] = ak_start(s);
		}
		for (uint32_t s = 0; s < AK_WRITERS; s++)
			while (atomic_load(&ak->done[s]) < quota * (p + 1)) {
				assert_true(ak_wall() < deadline);
				sched_yield();
			}
		ak_check(h, w, t0, cfg.analyzer_threshold_ppm, kill_phase,
		    nkills, quota, &hot);
	}
	atomic_store(&ak->stop, 1);
	for (uint32_t s = 0; s < AK_WRITERS; s++) {
		int st;

		assert_int_equal(waitpid(pid[s], &st, 0), pid[s]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	printf("# %u phases, %u writers x %" PRIu64 " requests a phase, %u "
	    "kills, %u keys over the threshold checked\n", phases, AK_WRITERS,
	    quota, nkills, hot);
	assert_true(nkills > 0 && hot > 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(ak_seg), 0);
	munmap(ak_logs, AK_WRITERS * ak_max * sizeof(*ak_logs));
	munmap(ak, sizeof(*ak));
	free(kill_phase);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
