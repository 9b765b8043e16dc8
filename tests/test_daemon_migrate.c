/* SPDX-License-Identifier: MIT */
/*
 * shmthrottled through its binary, upgraded: started with the snapshot of
 * an ABI 6, 7, 8 or 9 segment (tests/data/abi6.snap.zr to abi9) and
 * no segment, it migrates the snapshot into a segment of this format, says
 * what it carried in its log, runs on it (limiters, dictionary), and the
 * snapshot it writes at stop is of this format (a second start restores it
 * without migrating).  A segment of ABI 6 to 9 under its name is
 * migrated in place and the old object retired.  A damaged old snapshot is
 * refused with the reason.  Every test runs for each version.
 * argv[1] is the daemon binary.  Every wait polls with a bounded number of
 * retries.
 */
#include "daemon.h"
#include "image.h"
#include "segment.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_MS 20000

static const char *daemon_bin;

/* The fixtures of one older format (tests/data/README.md). */
struct fx {
	int abi;
	const char *conf, *snap, *seg;
};

static const struct fx fx6 = {
	6, SHMT_TEST_DATA "/abi6.conf", SHMT_TEST_DATA "/abi6.snap.zr",
	SHMT_TEST_DATA "/abi6.seg.zr",
};
static const struct fx fx7 = {
	7, SHMT_TEST_DATA "/abi7.conf", SHMT_TEST_DATA "/abi7.snap.zr",
	SHMT_TEST_DATA "/abi7.seg.zr",
};
static const struct fx fx8 = {
	8, SHMT_TEST_DATA "/abi8.conf", SHMT_TEST_DATA "/abi8.snap.zr",
	SHMT_TEST_DATA "/abi8.seg.zr",
};
static const struct fx fx9 = {
	9, SHMT_TEST_DATA "/abi9.conf", SHMT_TEST_DATA "/abi9.snap.zr",
	SHMT_TEST_DATA "/abi9.seg.zr",
};

/* Does the daemon's log say the line of a migration from F's ABI, with
 * TAIL after "ABI n to ABI m: " (m this build's)? */
static int
log_migrated(const char *log, const struct fx *f, const char *tail)
{
	char want[160];

	snprintf(want, sizeof(want), "migrated from segment format ABI %d to "
	    "ABI %u: %s", f->abi, (unsigned)SHMT_ABI_VERSION, tail);
	return tu_file_has(log, want);
}

static struct {
	char dir[64], seg[128], conf[128], log[128], snap[128];
	pid_t pid;
} e;

static int
env_done(void **state)
{
	(void)state;
	if (e.pid > 0) {
		kill(e.pid, SIGKILL);
		waitpid(e.pid, NULL, 0);
		e.pid = 0;
	}
	if (e.dir[0] == '\0')
		return 0;
	shmt_unlink(e.seg);
	if (tu_rmdir(e.dir) != 0)
		return -1;
	e.dir[0] = '\0';
	return 0;
}

/* A config with the fixture's sizes and limiters (F's config in
 * tests/data, less its segment name and daemon section) and the snapshot
 * at E.snap. */
static void
env_init(const struct fx *f, const char *tag)
{
	char *src = tu_read_all(f->conf), *text, *p;
	size_t cap;

	memset(&e, 0, sizeof(e));
	tu_tmpdir(e.dir, sizeof(e.dir), "dmig");
	tu_segname(e.seg, sizeof(e.seg), tag);
	snprintf(e.conf, sizeof(e.conf), "%.63s/d.conf", e.dir);
	snprintf(e.log, sizeof(e.log), "%.63s/d.log", e.dir);
	snprintf(e.snap, sizeof(e.snap), "%.63s/state.snap", e.dir);
	if ((p = strstr(src, "[daemon]")) != NULL)
		*p = '\0';
	if ((p = strstr(src, "name = ")) != NULL)
		p[0] = ';';
	cap = strlen(src) + 256;
	text = malloc(cap);
	assert_non_null(text);
	snprintf(text, cap, "%s[daemon]\nsnapshot = %s\nsnapshot_interval = 1h\n"
	    "log = stderr\n", src, e.snap);
	tu_write_text(e.conf, text);
	free(text);
	free(src);
}

static void
write_bytes(const char *path, const unsigned char *b, size_t n)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_true(fwrite(b, 1, n, f) == n);
	assert_int_equal(fclose(f), 0);
}

static void
wait_log(const char *needle)
{
	for (int i = 0; i < WAIT_MS / 5; i++) {
		if (tu_file_has(e.log, needle))
			return;
		tu_pause_ms(5);
	}
	fail_msg("log %s never said \"%s\"", e.log, needle);
}

/* Start the daemon and wait until it runs; a handle on its segment. */
static shmt_t *
start(void)
{
	shmt_segment_stat_t st;
	shmt_t *h = NULL;
	int status;

	e.pid = tu_daemon_spawn(daemon_bin, e.conf, e.seg, e.log, NULL, NULL);
	for (int i = 0; i < WAIT_MS / 5; i++) {
		if (waitpid(e.pid, &status, WNOHANG) == e.pid) {
			e.pid = 0;
			fail_msg("daemon exited early (status %d): see %s",
			    status, e.log);
		}
		if (h == NULL && shmt_open(e.seg, &h) != 0)
			h = NULL;
		if (h != NULL && shmt_segment_stat(h, &st) == 0 &&
		    st.daemon_pid == e.pid &&
		    tu_file_has(e.log, "running on segment"))
			return h;
		tu_pause_ms(5);
	}
	fail_msg("daemon never became ready");
	return NULL;
}

static void
stop(shmt_t *h)
{
	assert_int_equal(kill(e.pid, SIGTERM), 0);
	assert_int_equal(tu_wait_exit(&e.pid, WAIT_MS), 0);
	shmt_close(h);
}

static void
test_daemon_migrates_snapshot(void **state)
{
	shmt_limiter_stat_t st;
	unsigned char *img;
	char buf[16];
	size_t len, n = 0;
	const struct fx *f = *state;
	shmt_t *h;

	env_init(f, "dmig");
	img = tu_zr_load(f->snap, &len);
	write_bytes(e.snap, img, len);
	free(img);

	h = start();
	wait_log("restored from");
	assert_true(log_migrated(e.log, f, "3 limiters (10 uses in flight, 3 "
	    "client entries)"));
	assert_true(tu_file_has(e.log, "4 dictionary items, 2 counters, "
	    "analyzer summaries kept"));
	/* Items without a TTL outlive any time between the fixture and
	 * this run; the limiters are there with their definitions. */
	assert_int_equal(shmt_get(h, "user:1", 6, buf, sizeof(buf), &n), 0);
	assert_true(n == 5 && memcmp(buf, "alice", 5) == 0);
	assert_int_equal(shmt_limiter_stat(h, "api", &st), 0);
	assert_true(st.limit == 10 && st.window_ns == 3600000000000ULL);
	assert_int_equal(shmt_limiter_stat(h, "per-ip", &st), 0);
	assert_true(st.per_client && st.client_capacity == 64);
	assert_int_equal(shmt_limiter_stat(h, "keys", &st), 0);
	assert_int_equal(st.nkeys, 3);
	assert_true(shmt_try_use(h, "per-ip", "10.1.2.3", 8) == 1);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	stop(h);

	/* The snapshot written at stop is of this format. */
	{
		FILE *fp = fopen(e.snap, "r");
		unsigned char hd[SHMT_IMAGE_HDR_BYTES];

		assert_non_null(fp);
		assert_true(fread(hd, 1, sizeof(hd), fp) == sizeof(hd));
		fclose(fp);
		assert_int_equal(shmt__image_abi(hd, sizeof(hd)),
		    SHMT_ABI_VERSION);
	}
	assert_int_equal(shmt_unlink(e.seg), 0);
	assert_int_equal(truncate(e.log, 0), 0);
	h = start();
	assert_true(tu_file_has(e.log, "restored from"));
	assert_false(tu_file_has(e.log, "migrated"));
	assert_int_equal(shmt_get(h, "user:1", 6, buf, sizeof(buf), &n), 0);
	stop(h);
}

/* A segment of ABI 6 or ABI 7 under the daemon's name (as an old daemon
 * left it, with an old worker's mapping still on it): migrated in place,
 * the old object retired, and the log says so. */
static void
test_daemon_migrates_segment(void **state)
{
	shmt_limiter_stat_t st;
	unsigned char *raw;
	char buf[16];
	size_t len, n = 0;
	shmt_t *h;
	void *old;
	int fd;
	const struct fx *f = *state;
	char want[96];

	env_init(f, "dmigseg");
	raw = tu_zr_load(f->seg, &len);
	fd = shm_open(e.seg, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_true(write(fd, raw, len) == (ssize_t)len);
	old = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(old != MAP_FAILED);
	close(fd);
	free(raw);

	h = start();
	assert_true(log_migrated(e.log, f, "3 limiters (10 uses in flight, 3 "
	    "client entries), 4 dictionary items, 2 counters, analyzer "
	    "summaries kept"));
	assert_true(tu_file_has(e.log, "the old object is retired"));
	snprintf(want, sizeof(want), "workers built against the ABI %d library",
	    f->abi);
	assert_true(tu_file_has(e.log, want));
	assert_int_equal(((const struct shmt_hdr *)old)->sh_retired,
	    SHMT_SEG_RETIRED);
	assert_int_equal(shmt_get(h, "user:1", 6, buf, sizeof(buf), &n), 0);
	assert_true(n == 5 && memcmp(buf, "alice", 5) == 0);
	/* (Its uses in flight keep their release times, which lie on the
	 * fixture's boot's clock: test_migrate checks them on an injected
	 * one.) */
	assert_int_equal(shmt_limiter_stat(h, "per-ip", &st), 0);
	assert_true(st.per_client && st.client_capacity == 64);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	stop(h);
	munmap(old, len);
}

/* A damaged old snapshot: refused (exit 2) with the reason, nothing
 * published. */
static void
test_daemon_refuses_damaged(void **state)
{
	struct img_hdr ih;
	unsigned char *img;
	size_t len;
	int status;
	const struct fx *f = *state;
	char want[160];

	env_init(f, "dmigbad");
	img = tu_zr_load(f->snap, &len);
	/* Row 0's ring offset far outside the arena, the checksums right. */
	{
		uint64_t v = 1ULL << 40;
		unsigned char *row0 = img + SHMT_IMAGE_HDR_BYTES + 640;

		memcpy(row0 + 72, &v, 8);
		memcpy(&ih, img, sizeof(ih));
		ih.ih_sum = shmt__fnv1a_words(SHMT_FNV_INIT,
		    img + sizeof(ih), ih.ih_size);
		ih.ih_hdr_sum = shmt__fnv1a(SHMT_FNV_INIT, &ih,
		    offsetof(struct img_hdr, ih_hdr_sum));
		memcpy(img, &ih, sizeof(ih));
	}
	write_bytes(e.snap, img, len);
	free(img);
	e.pid = tu_daemon_spawn(daemon_bin, e.conf, e.seg, e.log, NULL, NULL);
	status = tu_wait_exit(&e.pid, WAIT_MS);
	assert_int_equal(status, 2);
	snprintf(want, sizeof(want), "cannot migrate it from segment format "
	    "ABI %d: limiter api: storage outside the image's arena", f->abi);
	assert_true(tu_file_has(e.log, want));
	assert_int_equal(shmt_unlink(e.seg), -ENOENT);
}

/*
 * The fixtures' segments hold times of the CLOCK_MONOTONIC of the machine
 * that made them (tests/data/README.md), and a live segment lies on the
 * boot that made it: a daemon whose clock has not reached them finds their
 * buckets in the future and refuses them, as it must.  So that the verdict
 * does not depend on this machine's uptime, the test runs in a time
 * namespace of its own (unshare(1), as root or in a user namespace) whose
 * CLOCK_MONOTONIC is past the latest fixture's by an hour, when this
 * machine's is not.  Returns only when no namespace is needed or it is
 * entered already (SHMT_TEST_TIMENS set); else execs, or exits 77 (ctest
 * counts it skipped) when unshare cannot run.
 */
static void
timens_enter(char **argv)
{
	const struct fx *all[] = { &fx6, &fx7, &fx8, &fx9 };
	uint64_t need = 0, now;
	char off[32];

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		size_t len;
		unsigned char *img = tu_zr_load(all[i]->snap, &len);
		struct img_hdr ih;

		assert_true(len >= sizeof(ih));
		memcpy(&ih, img, sizeof(ih));
		free(img);
		if (ih.ih_mono_ns > need)
			need = ih.ih_mono_ns;
	}
	need += 3600ULL * 1000000000ULL;
	now = tu_mono_ns();
	if (now >= need || getenv("SHMT_TEST_TIMENS") != NULL)
		return;
	snprintf(off, sizeof(off), "%llu",
	    (unsigned long long)((need - now) / 1000000000ULL + 1));
	setenv("SHMT_TEST_TIMENS", off, 1);
	printf("# CLOCK_MONOTONIC is before the fixtures' times: running in a "
	    "time namespace %s s ahead\n", off);
	fflush(stdout);
	{
		static char un[] = "unshare", ti[] = "--time",
		    mo[] = "--monotonic", bo[] = "--boottime", fo[] = "--fork",
		    ro[] = "--map-root-user";
		char *args[16] = { un, ti, mo, off, bo, off, fo };
		int n = 7;

		if (geteuid() != 0)
			args[n++] = ro;
		for (int i = 0; argv[i] != NULL && n < 15; i++)
			args[n++] = argv[i];
		args[n] = NULL;
		execvp("unshare", args);
	}
	printf("# cannot run unshare(1) for a time namespace: %s; skipped\n",
	    strerror(errno));
	exit(77);
}

int
main(int argc, char **argv)
{
	/* Each test for ABI 6's fixtures, then ABI 7's, 8's and 9's. */
#define BOTH(fn) \
	{ #fn, fn, NULL, env_done, (void *)&fx6 }, \
	{ #fn "_abi7", fn, NULL, env_done, (void *)&fx7 }, \
	{ #fn "_abi8", fn, NULL, env_done, (void *)&fx8 }, \
	{ #fn "_abi9", fn, NULL, env_done, (void *)&fx9 }
	const struct CMUnitTest tests[] = {
		BOTH(test_daemon_migrates_snapshot),
		BOTH(test_daemon_migrates_segment),
		BOTH(test_daemon_refuses_damaged),
	};
#undef BOTH

	if (argc < 2) {
		fprintf(stderr, "usage: %s SHMTHROTTLED\n", argv[0]);
		return 2;
	}
	daemon_bin = argv[1];
	timens_enter(argv);
	return cmocka_run_group_tests(tests, NULL, tu_sweep);
}
