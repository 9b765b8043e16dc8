/* SPDX-License-Identifier: MIT */
/*
 * shmthrottled through its binary: check-config, start and stop, a second
 * daemon refused, SIGHUP (a new limiter appears, a changed one keeps its
 * definition and state, per-client overrides are set again), an
 * incompatible segment, kill -9 with workers
 * running, snapshots (round trip and damaged files) and systemd
 * notifications.  argv[1] is the daemon binary; argv[2] is the tier,
 * "unit" (default) or "stress".  Every wait polls with a bounded number of retries.
 */
#include "daemon.h"
#include "segment.h"
#include "testutil.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *daemon_bin;

/* Poll every 5 ms, at most this long (sanitizer builds are slow). */
#define WAIT_MS 20000

struct env {
	char dir[64];         /* a private temporary directory */
	char seg[128];        /* a unique segment name */
	char conf[128];
	char log[128];
	char snap[128];
	pid_t pids[8];        /* children not yet reaped */
};

/* The environment of the running test: static, because a failed test
 * leaves its stack by longjmp and the teardown still needs it. */
static struct env the_env;

static struct env *
env_init(const char *tag)
{
	struct env *e = &the_env;

	memset(e, 0, sizeof(*e));
	tu_tmpdir(e->dir, sizeof(e->dir), "daemon");
	tu_segname(e->seg, sizeof(e->seg), tag);
	snprintf(e->conf, sizeof(e->conf), "%.63s/d.conf", e->dir);
	snprintf(e->log, sizeof(e->log), "%.63s/d.log", e->dir);
	snprintf(e->snap, sizeof(e->snap), "%.63s/state.snap", e->dir);
	return e;
}

static void
track(pid_t pid)
{
	for (int i = 0; i < 8; i++)
		if (the_env.pids[i] == 0) {
			the_env.pids[i] = pid;
			return;
		}
	fail_msg("too many children");
}

static void
untrack(pid_t pid)
{
	for (int i = 0; i < 8; i++)
		if (the_env.pids[i] == pid)
			the_env.pids[i] = 0;
}

/* Teardown, also after a failure: kill what runs, remove the segment and
 * the temporary directory. */
static int
env_done(void **state)
{
	struct env *e = &the_env;

	for (int i = 0; i < 8; i++)
		if (e->pids[i] > 0) {
			kill(e->pids[i], SIGKILL);
			waitpid(e->pids[i], NULL, 0);
			e->pids[i] = 0;
		}
	if (e->dir[0] == '\0')
		return 0;
	shmt_unlink(e->seg);
	if (tu_rmdir(e->dir) != 0)
		return -1;
	e->dir[0] = '\0';
	return 0;
}

/* Start the daemon on E's segment and config with extra ARGS (NULL-ended)
 * and optional environment ENV ("K=V", NULL-ended); stderr goes to E->log. */
static pid_t
spawn(const struct env *e, const char *const *args, const char *const *envs)
{
	pid_t pid = tu_daemon_spawn(daemon_bin, e->conf, e->seg, e->log, args,
	    envs);

	track(pid);
	return pid;
}

/* Wait for PID to exit; returns its exit status, or fails the test when
 * it died of a signal or does not exit in time (the teardown kills it). */
static int
wait_exit(pid_t pid)
{
	pid_t *slot = NULL, mine = pid;

	for (int i = 0; i < 8; i++)
		if (the_env.pids[i] == pid)
			slot = &the_env.pids[i];
	return tu_wait_exit(slot != NULL ? slot : &mine, WAIT_MS);
}

static void
wait_log(const struct env *e, const char *needle)
{
	for (int i = 0; i < WAIT_MS / 5; i++) {
		if (tu_file_has(e->log, needle))
			return;
		tu_pause_ms(5);
	}
	fail_msg("log %s never said \"%s\"", e->log, needle);
}

/* Wait until daemon PID runs E's segment (it has claimed the segment and
 * said it runs); returns a handle on the segment. */
static shmt_t *
wait_ready(const struct env *e, pid_t pid)
{
	shmt_segment_stat_t st;
	shmt_t *h = NULL;
	int st_exit;

	for (int i = 0; i < WAIT_MS / 5; i++) {
		if (waitpid(pid, &st_exit, WNOHANG) == pid && (untrack(pid), 1))
			fail_msg("daemon exited early (status %d)", st_exit);
		if (h == NULL && shmt_open(e->seg, &h) != 0)
			h = NULL;
		if (h != NULL && shmt_segment_stat(h, &st) == 0 &&
		    st.daemon_pid == pid && tu_file_has(e->log, "running on segment"))
			return h;
		tu_pause_ms(5);
	}
	fail_msg("daemon %d never became ready (open: %s, daemon pid %" PRId64
	    ", log: %s)", (int)pid, h != NULL ? "yes" : "no",
	    h != NULL && shmt_segment_stat(h, &st) == 0 ? st.daemon_pid : -1,
	    tu_file_has(e->log, "running on segment") ? "running" : "silent");
	return NULL;
}

static uint64_t
in_flight(shmt_t *h, const char *name)
{
	shmt_limiter_stat_t st;

	assert_int_equal(shmt_limiter_stat(h, name, &st), 0);
	return st.in_flight;
}

/* Take uses of NAME until denied; returns how many were granted. */
static int
drain(shmt_t *h, const char *name, int most)
{
	int n = 0, rc;

	while (n < most && (rc = shmt_try_use_key(h, name)) == 1)
		n++;
	return n;
}

/* A limiter whose window is long enough that nothing is released while a
 * test runs: what is counted stays counted. */
#define LONG_LIMITER(name, limit) \
	"[limiter " name "]\nlimit = " #limit "\nwindow = 1h\n" \
	"slack_time = 1m\nslack_uses = 1\n"

static void
test_check_config(void **state)
{
	struct env *e;
	char cmd[1024];

	e = env_init("chk");
	tu_write_text(e->conf, "[segment]\nname = /x\n\n[limiter a]\nlimit = 1\n"
	    "window = 1 fortnight\n");
	snprintf(cmd, sizeof(cmd), "%s --check-config %s 2>%s", daemon_bin,
	    e->conf, e->log);
	assert_int_equal(WEXITSTATUS(system(cmd)), 2);
	snprintf(cmd, sizeof(cmd), "%s:6: key 'window': cannot read", e->conf);
	assert_true(tu_file_has(e->log, cmd));
	tu_write_text(e->conf, LONG_LIMITER("a", 3));
	snprintf(cmd, sizeof(cmd), "%s --check-config %s >%s", daemon_bin,
	    e->conf, e->log);
	assert_int_equal(WEXITSTATUS(system(cmd)), 0);
	assert_true(tu_file_has(e->log, "[limiter a]\nlimit = 3\nwindow = 1h\n"));
}


/* What the library would refuse is refused by --check-config, at the
 * key's line, and the daemon given that config exits with the config's
 * status (2) before creating anything; a directory is not a config. */
static void
test_check_config_library_rules(void **state)
{
	struct env *e;
	char cmd[1024];
	shmt_t *h;
	pid_t pid;

	e = env_init("chklib");
	tu_write_text(e->conf, "[segment]\nname = /x\n[dictionary]\nsize = 1MiB\n"
	    "shards = 8\n");
	snprintf(cmd, sizeof(cmd), "%s --check-config %s 2>%s", daemon_bin,
	    e->conf, e->log);
	assert_int_equal(WEXITSTATUS(system(cmd)), 2);
	snprintf(cmd, sizeof(cmd), "%s:4: key 'size': dict_bytes: each shard "
	    "needs at least 2 MiB", e->conf);
	assert_true(tu_file_has(e->log, cmd));
	pid = spawn(e, NULL, NULL);
	assert_int_equal(wait_exit(pid), 2);
	assert_int_equal(shmt_open(e->seg, &h), -ENOENT);

	snprintf(cmd, sizeof(cmd), "%s --check-config %s 2>%s", daemon_bin,
	    e->dir, e->log);
	assert_int_equal(WEXITSTATUS(system(cmd)), 2);
	assert_true(tu_file_has(e->log, "not a regular file (a directory)"));
}

/* Start, use, stop: the segment and its state outlive the daemon, the
 * daemon word is released; --unlink-on-exit removes the segment. */
static void
test_start_stop(void **state)
{
	const char *unlink_arg[] = { "--unlink-on-exit", NULL };
	shmt_segment_stat_t st;
	struct env *e;
	shmt_t *h, *h2;
	pid_t pid;

	e = env_init("startstop");
	tu_write_text(e->conf, LONG_LIMITER("a", 5));
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	assert_int_equal(drain(h, "a", 100), 5);
	/* The first housekeeping run and heartbeat follow readiness. */
	for (int i = 0; i < WAIT_MS / 5; i++) {
		assert_int_equal(shmt_segment_stat(h, &st), 0);
		if (st.housekeeping_runs > 0 && st.daemon_heartbeat_ns > 0)
			break;
		tu_pause_ms(5);
	}
	assert_true(st.daemon_alive && st.housekeeping_runs > 0);
	assert_true(st.daemon_heartbeat_ns > 0);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	assert_int_equal(shmt_segment_stat(h, &st), 0);
	assert_true(st.daemon_pid == 0);
	shmt_close(h);

	/* A new daemon attaches to the segment as it was. */
	pid = spawn(e, unlink_arg, NULL);
	h = wait_ready(e, pid);
	assert_true(in_flight(h, "a") == 5);
	assert_int_equal(shmt_try_use_key(h, "a"), 0);
	assert_int_equal(kill(pid, SIGINT), 0);
	assert_int_equal(wait_exit(pid), 0);
	assert_int_equal(shmt_open(e->seg, &h2), -ENOENT);
	shmt_close(h);
	assert_true(tu_file_has(e->log, "attached to segment"));
}

/* The system call that stopped process PID is blocked in, or -1 when it is
 * not in one (from /proc/PID/syscall). */
static long
blocked_in(pid_t pid)
{
	char path[64], buf[128];
	long n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	if (fgets(buf, sizeof(buf), f) == NULL || sscanf(buf, "%ld", &n) != 1)
		n = -1;
	fclose(f);
	return n;
}

/* Stop daemon PID where it waits for its next deadline, between two rounds
 * of work, so that nothing it does is cut in the middle. */
static void
stop_idle(pid_t pid)
{
	for (int i = 0; i < WAIT_MS; i++) {
		int st;

		assert_int_equal(kill(pid, SIGSTOP), 0);
		assert_int_equal(waitpid(pid, &st, WUNTRACED), pid);
		assert_true(WIFSTOPPED(st));
		if (blocked_in(pid) == SYS_rt_sigtimedwait)
			return;
		assert_int_equal(kill(pid, SIGCONT), 0);
		tu_pause_ms(1);
	}
	fail_msg("daemon %d never found waiting", (int)pid);
}

/* The object truncated under the daemon: it notices at its next
 * housekeeping and exits with an error, without touching the missing pages
 * (which would kill it with SIGBUS).  It is truncated while the daemon is
 * stopped between two rounds: one cut in the middle of a round would die,
 * as the README says. */
static void
test_truncated(void **state)
{
	struct env *e;
	shmt_t *h;
	pid_t pid;
	int fd;

	(void)state;
	e = env_init("trunc");
	tu_write_text(e->conf, LONG_LIMITER("a", 5));
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	stop_idle(pid);
	fd = shm_open(e->seg, O_RDWR, 0);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 8192), 0);
	close(fd);
	assert_int_equal(kill(pid, SIGCONT), 0);
	assert_int_equal(wait_exit(pid), 1);  /* the daemon's failure code */
	assert_true(tu_file_has(e->log, "truncated"));
	shmt_close(h);
	assert_int_equal(shmt_unlink(e->seg), 0);
}

/* A segment removed under the daemon, by shmt_unlink (shmthrottle destroy)
 * or by hand: its workers get SHMT_ESTALE, never a limit enforced on a
 * segment nobody can open, and the daemon exits (1) so that a restart
 * creates the segment again.  By hand, the daemon's housekeeping is what
 * finds it: within a heartbeat (1 s), so the wait is bounded by the log. */
static void
test_removed(void **state)
{
	for (int by_hand = 0; by_hand < 2; by_hand++) {
		struct env *e;
		shmt_t *h;
		pid_t pid;

		(void)state;
		e = env_init(by_hand ? "rmhand" : "rmlib");
		tu_write_text(e->conf, LONG_LIMITER("a", 5));
		pid = spawn(e, NULL, NULL);
		h = wait_ready(e, pid);
		assert_int_equal(shmt_try_use_key(h, "a"), 1);
		if (by_hand)
			assert_int_equal(shm_unlink(e->seg), 0);
		else
			assert_int_equal(shmt_unlink(e->seg), 0);
		assert_int_equal(wait_exit(pid), 1);
		assert_true(tu_file_has(e->log, "was removed"));
		assert_int_equal(shmt_try_use_key(h, "a"), SHMT_ESTALE);
		shmt_close(h);
		env_done(NULL);
	}
}

/* A segment another user made first is not attached: the daemon says
 * whose it is and exits with an error, leaving it as it was. */
static void
test_untrusted(void **state)
{
	char path[192];
	shmt_config_t cfg;
	struct env *e;
	shmt_t *h = NULL;
	pid_t pid;

	(void)state;
	if (geteuid() != 0)
		skip();
	e = env_init("untrusted");
	tu_write_text(e->conf, LONG_LIMITER("a", 5));
	shmt_config_init(&cfg);
	cfg.dict_bytes = 0;
	cfg.counters_bytes = 0;
	cfg.analyzer_bytes = 0;
	assert_int_equal(shmt_create(e->seg, &cfg, &h), 0);
	shmt_close(h);
	snprintf(path, sizeof(path), "/dev/shm%s", e->seg);
	assert_int_equal(chown(path, 65532, (gid_t)-1), 0);
	pid = spawn(e, NULL, NULL);
	assert_int_equal(wait_exit(pid), 1);
	assert_true(tu_file_has(e->log, "owned by uid 65532"));
	assert_true(tu_file_has(e->log, "not trusted"));
	assert_int_equal(shmt_unlink(e->seg), 0);
}

static void
test_second_refused(void **state)
{
	char want[128];
	struct env *e;
	shmt_t *h;
	pid_t a, b;

	e = env_init("second");
	tu_write_text(e->conf, LONG_LIMITER("a", 5));
	a = spawn(e, NULL, NULL);
	h = wait_ready(e, a);
	b = spawn(e, NULL, NULL);
	assert_int_equal(wait_exit(b), 1);
	snprintf(want, sizeof(want), "already running as pid %d", (int)a);
	assert_true(tu_file_has(e->log, want));
	assert_int_equal(kill(a, SIGTERM), 0);
	assert_int_equal(wait_exit(a), 0);
	shmt_close(h);
}

#define LIMITER_USES(name, limit, uses) \
	"[limiter " name "]\nlimit = " #limit "\nwindow = 1h\n" \
	"slack_time = 1m\nslack_uses = " #uses "\n"

/* SIGHUP: a new limiter appears; a changed one is changed in place with
 * its uses in flight (never a fresh allowance); one that cannot change in
 * place keeps its definition and the log says how to apply it; a removed
 * one stays, or is deleted with delete_removed; a broken file leaves the
 * running config alone. */
static void
test_sighup(void **state)
{
	shmt_limiter_stat_t st;
	struct env *e;
	shmt_t *h;
	pid_t pid;

	e = env_init("hup");
	tu_write_text(e->conf, LONG_LIMITER("a", 5));
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	assert_int_equal(drain(h, "a", 2), 2);
	assert_int_equal(shmt_limiter_stat(h, "b", &st), -ENOENT);

	/* 60 + 5 buckets: the ring made for limit 5 holds it. */
	tu_write_text(e->conf, LIMITER_USES("a", 50, 10) LONG_LIMITER("b", 7));
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "reloaded: 2 limiters");
	assert_int_equal(shmt_limiter_stat(h, "b", &st), 0);
	assert_true(st.limit == 7);
	assert_true(tu_file_has(e->log, "limiter 'b' added"));
	assert_true(tu_file_has(e->log, "limiter 'a' changed in place: limit 50"));
	assert_int_equal(shmt_limiter_stat(h, "a", &st), 0);
	assert_true(st.limit == 50 && st.in_flight == 2);
	assert_int_equal(drain(h, "a", 100), 48);

	/* 60 + 500 buckets: not in place; the log gives the commands. */
	tu_write_text(e->conf, LONG_LIMITER("a", 500) LONG_LIMITER("b", 7));
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "it cannot change in place");
	assert_true(tu_file_has(e->log, "limiter delete a && kill -HUP"));
	assert_int_equal(shmt_limiter_stat(h, "a", &st), 0);
	assert_true(st.limit == 50 && st.in_flight == 50);

	tu_write_text(e->conf, LIMITER_USES("a", 50, 10));
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "limiter 'b' is no longer in the config; it stays");
	assert_true(tu_file_has(e->log, "limiter delete b' (with [daemon] "
	    "delete_removed = yes"));
	assert_int_equal(shmt_limiter_stat(h, "b", &st), 0);
	/* Back in the config, then removed by a config that deletes. */
	tu_write_text(e->conf, LIMITER_USES("a", 50, 10) LONG_LIMITER("b", 7)
	    LONG_LIMITER("c", 3));
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "reloaded: 3 limiters");
	tu_write_text(e->conf, LIMITER_USES("a", 50, 10) LONG_LIMITER("c", 3)
	    "[daemon]\ndelete_removed = yes\n");
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "limiter 'b' is no longer in the config: deleted");
	assert_int_equal(shmt_limiter_stat(h, "b", &st), -ENOENT);
	assert_int_equal(shmt_limiter_stat(h, "a", &st), 0);
	assert_true(st.limit == 50 && st.in_flight == 50);

	tu_write_text(e->conf, "[limiter a\n");
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "reload failed, keeping the running config");
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

#define PC_LIMITER "[limiter pc]\nlimit = 5\nwindow = 1h\nslack_time = 1m\n" \
	"slack_uses = 5\nper_client = yes\ncapacity = 64\noverrides = 8\n"

/* Per-client overrides from the config: set at start, set again on
 * SIGHUP (the config's rule wins for each client it names), while one
 * set by hand for a client the config does not name stays. */
static void
test_sighup_overrides(void **state)
{
	shmt_client_rule_t r;
	struct env *e;
	shmt_t *h;
	pid_t pid;

	e = env_init("hupov");
	tu_write_text(e->conf, PC_LIMITER "override = bot deny\n");
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	assert_int_equal(shmt_client_get(h, "pc", "bot", 3, &r), 1);
	assert_int_equal(r.kind, SHMT_RULE_DENY);
	assert_int_equal(shmt_try_use(h, "pc", "bot", 3), 0);
	r = (shmt_client_rule_t){ .kind = SHMT_RULE_ALLOW };
	assert_int_equal(shmt_client_set(h, "pc", "bot", 3, &r), 0);
	r = (shmt_client_rule_t){ .kind = SHMT_RULE_LIMIT, .limit = 2 };
	assert_int_equal(shmt_client_set(h, "pc", "by-hand", 7, &r), 0);
	assert_int_equal(shmt_try_use(h, "pc", "bot", 3), 1);

	tu_write_text(e->conf, PC_LIMITER "override = bot deny\n"
	    "override = gold limit=50\n");
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "reloaded: 1 limiters");
	assert_int_equal(shmt_client_get(h, "pc", "bot", 3, &r), 1);
	assert_int_equal(r.kind, SHMT_RULE_DENY);
	assert_int_equal(shmt_try_use(h, "pc", "bot", 3), 0);
	assert_int_equal(shmt_client_get(h, "pc", "gold", 4, &r), 1);
	assert_true(r.kind == SHMT_RULE_LIMIT && r.limit == 50);
	assert_int_equal(shmt_client_get(h, "pc", "by-hand", 7, &r), 1);
	assert_true(r.kind == SHMT_RULE_LIMIT && r.limit == 2);

	/* A bad rule: the reload fails and nothing changes. */
	tu_write_text(e->conf, PC_LIMITER "override = bot sometimes\n");
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "reload failed, keeping the running config");
	assert_true(tu_file_has(e->log, "the rule is limit=N, allow or deny"));
	assert_int_equal(shmt_client_get(h, "pc", "bot", 3, &r), 1);
	assert_int_equal(r.kind, SHMT_RULE_DENY);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

/* The config of limiter "pc" with an override table of TABLE and the
 * overrides "c1 deny" to "cN deny" after "vip allow", into BUF. */
static void
pc_overrides(char *buf, size_t cap, unsigned table, unsigned n,
    const char *extra)
{
	size_t len = (size_t)snprintf(buf, cap, "[limiter pc]\nlimit = 5\n"
	    "window = 1h\nslack_time = 1m\nslack_uses = 5\nper_client = yes\n"
	    "capacity = 64\noverrides = %u\noverride = vip allow\n", table);

	for (unsigned i = 1; i <= n; i++)
		len += (size_t)snprintf(buf + len, cap - len,
		    "override = c%u deny\n", i);
	snprintf(buf + len, cap - len, "%s", extra);
	assert_true(len < cap);
}

static void
expect_rule(shmt_t *h, const char *client, int kind)
{
	shmt_client_rule_t r;

	assert_int_equal(shmt_client_get(h, "pc", client, strlen(client), &r),
	    1);
	assert_int_equal(r.kind, kind);
}

static void
expect_table(shmt_t *h, uint32_t cap, uint32_t used)
{
	shmt_limiter_stat_t st;

	assert_int_equal(shmt_limiter_stat(h, "pc", &st), 0);
	if (st.client_overrides != cap || st.overrides_in_use != used)
		fail_msg("overrides %u/%u, want %u/%u", st.overrides_in_use,
		    st.client_overrides, used, cap);
}

/* More override lines than the segment's table, with a larger
 * `overrides =`: the table grows first (the limiter is defined anew by a
 * move), then every override is set, on SIGHUP and at start alike.  An
 * override that still cannot be set is logged with its line and does not
 * stop the start. */
static void
test_overrides_grow(void **state)
{
	char conf[2048], want[256];
	shmt_client_rule_t r = { .kind = SHMT_RULE_ALLOW };
	struct env *e;
	shmt_t *h;
	pid_t pid;

	(void)state;
	e = env_init("ovgrow");
	pc_overrides(conf, sizeof(conf), 4, 0, "");
	tu_write_text(e->conf, conf);
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	expect_table(h, 4, 1);
	assert_int_equal(shmt_try_use(h, "pc", "x", 1), 1);

	/* SIGHUP: 11 rules for a table of 16. */
	pc_overrides(conf, sizeof(conf), 16, 10, "");
	tu_write_text(e->conf, conf);
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "reloaded: 1 limiters");
	assert_false(tu_file_has(e->log, "override table is full"));
	expect_table(h, 16, 11);
	expect_rule(h, "vip", SHMT_RULE_ALLOW);
	expect_rule(h, "c10", SHMT_RULE_DENY);
	assert_int_equal(shmt_try_use(h, "pc", "c10", 3), 0);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);

	/* A start on the segment of table 16 with 21 rules for 32 (the log
	 * emptied, so that "running" is this start's). */
	pc_overrides(conf, sizeof(conf), 32, 20, "");
	tu_write_text(e->conf, conf);
	tu_write_text(e->log, "");
	pid = spawn(e, NULL, NULL);
	shmt_close(h);
	h = wait_ready(e, pid);
	expect_table(h, 32, 21);
	expect_rule(h, "c20", SHMT_RULE_DENY);
	assert_false(tu_file_has(e->log, "override table is full"));
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);

	/* The table filled by hand: the config's one new rule (line 30) has
	 * no room; the daemon starts anyway and says what it left out. */
	for (int i = 0; i < 11; i++) {
		char id[16];

		snprintf(id, sizeof(id), "hand%d", i);
		assert_int_equal(shmt_client_set(h, "pc", id, strlen(id), &r),
		    0);
	}
	expect_table(h, 32, 32);
	pc_overrides(conf, sizeof(conf), 32, 20, "override = late deny\n");
	tu_write_text(e->conf, conf);
	tu_write_text(e->log, "");
	pid = spawn(e, NULL, NULL);
	shmt_close(h);
	h = wait_ready(e, pid);
	snprintf(want, sizeof(want), "%s:30: limiter 'pc': override for "
	    "client 'late': the segment's override table is full: this "
	    "override is not applied", e->conf);
	wait_log(e, want);
	assert_true(tu_file_has(e->log, "limiter 'pc': 1 of its 22 overrides"));
	assert_int_equal(shmt_client_get(h, "pc", "late", 4, &r), 0);
	expect_rule(h, "c20", SHMT_RULE_DENY);
	assert_int_equal(shmt_try_use(h, "pc", "x", 1), 1);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

/* A limiter that cannot be defined on SIGHUP (its log does not fit the
 * arena) is not counted as configured, nor kept in the running config:
 * the next reload, without it, does not say it stays in the segment. */
static void
test_sighup_undefined(void **state)
{
	shmt_limiter_stat_t st;
	struct env *e;
	shmt_t *h;
	pid_t pid;

	(void)state;
	e = env_init("hupundef");
	tu_write_text(e->conf, LONG_LIMITER("a", 5));
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	tu_write_text(e->conf, LONG_LIMITER("a", 5) "[limiter big]\n"
	    "mode = exact\nlimit = 1000000\nwindow = 1h\n");
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "reloaded: 1 limiters configured; 1 in the file could "
	    "not be defined and are not ('big')");
	assert_true(tu_file_has(e->log, "limiter 'big': "));
	assert_int_equal(shmt_limiter_stat(h, "big", &st), -ENOENT);
	tu_write_text(e->conf, LONG_LIMITER("a", 5));
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "reloaded: 1 limiters configured\n");
	assert_false(tu_file_has(e->log, "limiter 'big' is no longer"));
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

/* SIGHUP on per-client limiters and a key pool: every changed one is
 * defined anew in one move into a new generation, each client's uses in
 * flight carried, and a handle opened before follows; a change the new
 * generation cannot hold leaves every limiter as it was, and the log says
 * why. */
#define RD_PD(limit, window) "[limiter pd]\nlimit = " #limit "\nwindow = " \
	window "\nslack_time = 1m\nslack_uses = 1\nper_client = yes\n" \
	"capacity = 16\n"
#define RD_KP(window) "[limiter kp]\nkeys = k1, k2\nuses_per_key = 2\n" \
	"window = " window "\nslack_time = 1m\nslack_uses = 1\n"
#define RD_PC(capacity) "[limiter pc]\nlimit = 3\nwindow = 1h\n" \
	"slack_time = 1m\nslack_uses = 1\nper_client = yes\ncapacity = " \
	#capacity "\noverrides = 8\n"

static void
test_sighup_redefine(void **state)
{
	shmt_limiter_stat_t st;
	char name[16];
	struct env *e;
	shmt_t *h;
	pid_t pid;

	e = env_init("hupre");
	tu_write_text(e->conf, PC_LIMITER RD_PD(3, "1h") RD_KP("1h"));
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	for (int i = 0; i < 5; i++)
		assert_int_equal(shmt_try_use(h, "pc", "a", 1), 1);
	assert_int_equal(shmt_try_use(h, "pc", "c", 1), 1);
	for (int i = 0; i < 2; i++)
		assert_int_equal(shmt_try_use(h, "pd", "b", 1), 1);
	for (int i = 0; i < 3; i++)
		assert_true(shmt_next_key(h, "kp", name, sizeof(name)) > 0);

	tu_write_text(e->conf, RD_PC(128) RD_PD(6, "2h") RD_KP("2h"));
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "reloaded: 3 limiters");
	assert_true(tu_file_has(e->log, "limiters 'pc', 'pd', 'kp' defined "
	    "anew by a move into a new generation"));
	assert_true(tu_file_has(e->log, "every use in flight carried"));
	assert_false(tu_file_has(e->log, "limiter delete kp"));
	/* The handle opened before follows: a holds 5 of its new 3. */
	assert_int_equal(shmt_try_use(h, "pc", "a", 1), 0);
	assert_int_equal(shmt_limiter_stat(h, "pc", &st), 0);
	assert_true(st.limit == 3 && st.client_capacity == 128 &&
	    st.in_flight == 6 && st.slack_uses == 1);
	assert_int_equal(shmt_try_use(h, "pc", "c", 1), 1);
	assert_int_equal(shmt_try_use(h, "pc", "c", 1), 1);
	assert_int_equal(shmt_try_use(h, "pc", "c", 1), 0);
	assert_int_equal(shmt_limiter_stat(h, "pd", &st), 0);
	assert_true(st.limit == 6 && st.in_flight == 2);
	for (int i = 0; i < 4; i++)
		assert_int_equal(shmt_try_use(h, "pd", "b", 1), 1);
	assert_int_equal(shmt_try_use(h, "pd", "b", 1), 0);
	/* k1 held two of the three: the pool holds two per name, full. */
	assert_int_equal(shmt_limiter_stat(h, "kp", &st), 0);
	assert_true(st.window_ns == 2 * 3600 * 1000000000ULL &&
	    st.in_flight == 4);
	assert_int_equal(shmt_next_key(h, "kp", name, sizeof(name)), 0);

	/* a and c hold uses: a table of one entry cannot hold both. */
	tu_write_text(e->conf, RD_PC(1) RD_PD(7, "2h") RD_KP("2h"));
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "the move that defines them anew failed");
	assert_true(tu_file_has(e->log, "finds no free entry"));
	assert_true(tu_file_has(e->log, "they keep their running definitions"));
	assert_int_equal(shmt_limiter_stat(h, "pc", &st), 0);
	assert_true(st.limit == 3 && st.client_capacity == 128 &&
	    st.in_flight == 8);
	assert_int_equal(shmt_limiter_stat(h, "pd", &st), 0);
	assert_true(st.limit == 6 && st.in_flight == 6);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

/* SIGHUP on rate and exact mode: a changed one is changed in place with
 * its uses in flight; an exact limit above its log is applied by a move,
 * its uses in flight carried; another mode is refused, and the commands
 * the log gives apply it. */
static void
test_sighup_modes(void **state)
{
	shmt_limiter_stat_t st;
	char cmd[512];
	struct env *e;
	shmt_t *h;
	pid_t pid;

	e = env_init("hupm");
	tu_write_text(e->conf, "[limiter r]\nmode = gcra\nlimit = 10\n"
	    "window = 1h\nburst = 6\n[limiter x]\nmode = exact\n"
	    "limit = 8\nwindow = 1h\n");
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	assert_int_equal(drain(h, "r", 4), 4);
	assert_int_equal(drain(h, "x", 5), 5);
	tu_write_text(e->conf, "[limiter r]\nmode = gcra\nlimit = 5\n"
	    "window = 1h\nburst = 6\n[limiter x]\nmode = exact\n"
	    "limit = 6\nwindow = 2h\n");
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "limiter 'x' changed in place: limit 6");
	assert_true(tu_file_has(e->log, "limiter 'r' changed in place: limit 5 "
	    "per 3600000000000 ns, burst 6"));
	/* Four uses in flight now cost 12 min each: two more fit the burst. */
	assert_int_equal(shmt_limiter_stat(h, "r", &st), 0);
	assert_true(st.limit == 5 && st.in_flight == 4);
	assert_int_equal(drain(h, "r", 10), 2);
	assert_int_equal(shmt_limiter_stat(h, "x", &st), 0);
	assert_true(st.limit == 6 && st.window_ns == 2 * 3600 * 1000000000ULL &&
	    st.in_flight == 5);
	assert_int_equal(drain(h, "x", 10), 1);

	/* Above the 8 grants its log holds: a move gives it a log of 20,
	 * its six uses in flight carried; the handle follows. */
	tu_write_text(e->conf, "[limiter r]\nmode = gcra\nlimit = 5\n"
	    "window = 1h\nburst = 6\n[limiter x]\nmode = exact\n"
	    "limit = 20\nwindow = 2h\n");
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "limiter 'x' defined anew by a move");
	assert_false(tu_file_has(e->log, "limiter delete x && kill -HUP"));
	assert_int_equal(shmt_limiter_stat(h, "x", &st), 0);
	assert_true(st.limit == 20 && st.in_flight == 6);
	assert_int_equal(drain(h, "x", 30), 14);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);

	/* Another mode: refused, and the advice works. */
	tu_write_text(e->conf, "[limiter r]\nmode = gcra\nlimit = 5\n"
	    "window = 1h\nburst = 6\n[limiter x]\nlimit = 30\n"
	    "window = 2h\nslack_time = 1m\nslack_uses = 1\n");
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "it cannot change in place");
	assert_true(tu_file_has(e->log, "limiter delete x && kill -HUP"));
	assert_int_equal(shmt_limiter_stat(h, "x", &st), 0);
	assert_true(st.limit == 20 && st.mode == SHMT_MODE_EXACT);
#ifdef SHMT_CLI_PATH
	{
		/* The advice as the log wrote it, the CLI's path put first. */
		static const char lead[] = "forgetting its uses in flight: "
		    "shmthrottle ";
		char *text = tu_read_all(e->log), *at = NULL, *p, *nl;

		assert_non_null(text);
		for (p = text; (p = strstr(p, lead)) != NULL; p++)
			at = p + sizeof(lead) - 1;
		assert_non_null(at);
		if ((nl = strchr(at, '\n')) != NULL)
			*nl = '\0';
		snprintf(cmd, sizeof(cmd), "(%s %s) >/dev/null", SHMT_CLI_PATH,
		    at);
		free(text);
		assert_int_equal(system(cmd), 0);
	}
#else
	assert_int_equal(shmt_limiter_delete(h, "x"), 0);
	assert_int_equal(kill(pid, SIGHUP), 0);
#endif
	/* Defined again by the reload (the config knew it: no "added"). */
	for (int ms = 0; ms < WAIT_MS; ms += 10) {
		if (shmt_limiter_stat(h, "x", &st) == 0 && st.limit == 30)
			break;
		tu_pause_ms(10);
	}
	assert_int_equal(shmt_limiter_stat(h, "x", &st), 0);
	assert_true(st.limit == 30 && st.in_flight == 0 &&
	    st.mode == SHMT_MODE_BUCKETS);

	/* Into rate mode: by a move, its uses in flight carried. */
	assert_int_equal(drain(h, "x", 3), 3);
	tu_write_text(e->conf, "[limiter r]\nmode = gcra\nlimit = 5\n"
	    "window = 1h\nburst = 6\n[limiter x]\nmode = gcra\n"
	    "limit = 30\nwindow = 2h\nburst = 5\n");
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "limiter 'x' defined anew by a move into a new generation");
	for (int ms = 0; ms < WAIT_MS; ms += 10) {
		if (shmt_limiter_stat(h, "x", &st) == 0 &&
		    st.mode == SHMT_MODE_GCRA)
			break;
		tu_pause_ms(10);
	}
	assert_int_equal(shmt_limiter_stat(h, "x", &st), 0);
	assert_true(st.mode == SHMT_MODE_GCRA && st.in_flight >= 3);
	/* Their release, 2h on, is past now + 3 x 4 min: full. */
	assert_int_equal(drain(h, "x", 5), 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

/* SIGHUP with a bigger dictionary, more limiter rows and a bigger arena:
 * the daemon moves the segment into a new generation; a worker's handle
 * follows on its next call with its uses in flight and its items; a size
 * the state cannot fit is refused with the size to keep, and the segment
 * serves on as it was. */
static void
test_sighup_resize(void **state)
{
	shmt_dict_stat_t ds;
	shmt_segment_stat_t ss;
	struct env *e;
	char buf[16];
	size_t vlen = 0;
	shmt_t *h;
	pid_t pid;

	(void)state;
	e = env_init("resize");
	tu_write_text(e->conf, "[segment]\nmax_limiters = 4\n"
	    "[dictionary]\nsize = 4MiB\nshards = 2\n" LONG_LIMITER("a", 5));
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	assert_int_equal(drain(h, "a", 2), 2);
	assert_int_equal(shmt_set(h, "k", 1, "v1", 2, 0), 0);
	assert_int_equal(shmt_dict_stat(h, &ds), 0);
	assert_true(ds.bytes < (8ULL << 20));

	tu_write_text(e->conf, "[segment]\nmax_limiters = 16\narena = 2MiB\n"
	    "[dictionary]\nsize = 16MiB\nshards = 2\n" LONG_LIMITER("a", 5));
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "reloaded: 1 limiters");
	if (!tu_file_has(e->log, "moved to a new generation")) {
		char *log = tu_read_all(e->log);

		fail_msg("no move: %s", log != NULL ? log : "(no log)");
	}
	/* The same handle, no reopen: it follows. */
	assert_int_equal(shmt_dict_stat(h, &ds), 0);
	assert_true(ds.bytes >= (15ULL << 20));
	assert_int_equal(shmt_get(h, "k", 1, buf, sizeof(buf), &vlen), 0);
	assert_int_equal(vlen, 2);
	assert_int_equal(in_flight(h, "a"), 2);
	assert_int_equal(drain(h, "a", 10), 3);
	assert_int_equal(shmt_segment_stat(shmt__gen_live(h), &ss), 0);
	assert_int_equal(ss.max_limiters, 16);
	assert_int_equal(ss.daemon_pid, pid);

	/* A config the daemon refuses changes nothing. */
	tu_write_text(e->conf, "[segment]\nmax_limiters = 1\narena = 2MiB\n"
	    "[dictionary]\nsize = 16MiB\nshards = 2\n" LONG_LIMITER("a", 5)
	    LONG_LIMITER("b", 5));
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "reload failed");
	/* What shapes the data moved cannot change: said, nothing moves. */
	tu_write_text(e->conf, "[segment]\nmax_limiters = 16\narena = 2MiB\n"
	    "[dictionary]\nsize = 16MiB\nshards = 2\n[counters]\n"
	    "window = 2h\n" LONG_LIMITER("a", 5));
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "[counters] window cannot change by a move (it shapes "
	    "the data moved): it stays 24h");
	assert_true(tu_file_has(e->log, "it keeps its sizes, parameters and "
	    "state"));
	/* The value kept is said in the config's unit, and the advice names
	 * no section the error is not about. */
	tu_write_text(e->conf, "[segment]\nmax_limiters = 16\narena = 2MiB\n"
	    "[dictionary]\nsize = 16MiB\nshards = 2\n[analyzer]\n"
	    "threshold = 25%\n" LONG_LIMITER("a", 5));
	assert_int_equal(kill(pid, SIGHUP), 0);
	wait_log(e, "[analyzer] threshold cannot change by a move (it shapes "
	    "the data moved): it stays 10%;");
	assert_false(tu_file_has(e->log, "Change [segment]"));
	assert_int_equal(in_flight(h, "a"), 5);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

/* Another process moves the segment (as `shmthrottle resize` does): the
 * daemon follows it, serves and claims the new generation, and keeps
 * running; before, its housekeeping took the moved segment for a removed
 * one and exited. */
static void
test_moved_by_other(void **state)
{
	shmt_segment_stat_t ss;
	shmt_config_t c;
	struct env *e;
	char err[512];
	shmt_t *h;
	pid_t pid;
	int st;

	(void)state;
	e = env_init("movedby");
	tu_write_text(e->conf, "[segment]\nmax_limiters = 4\n"
	    "[dictionary]\nsize = 4MiB\nshards = 2\n" LONG_LIMITER("a", 5));
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	assert_int_equal(drain(h, "a", 2), 2);
	shmt__move_config(h, &c);
	c.max_limiters = 16;
	err[0] = '\0';
	if (shmt__move(h, &c, NULL, NULL, err, sizeof(err)) != 0)
		fail_msg("move: %s", err);
	wait_log(e, "moved to a new generation by another process");
	/* A call follows the move (the handle is on the new generation). */
	assert_int_equal(in_flight(h, "a"), 2);
	/* Still running a heartbeat later, and the new generation's daemon. */
	for (int i = 0; i < 50; i++) {
		assert_int_equal(waitpid(pid, &st, WNOHANG), 0);
		assert_int_equal(shmt_segment_stat(shmt__gen_live(h), &ss), 0);
		if (ss.daemon_pid == pid && ss.max_limiters == 16)
			break;
		nanosleep(&(struct timespec){ 0, 20000000 }, NULL);
	}
	assert_int_equal(ss.max_limiters, 16);
	assert_int_equal(ss.daemon_pid, pid);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

/* An object that is not a segment is refused with what differs, and
 * replaced with --recreate. */
static void
test_incompatible(void **state)
{
	const char *recreate[] = { "--recreate", "--unlink-on-exit", NULL };
	char junk[8192];
	struct env *e;
	shmt_t *h;
	pid_t pid;
	int fd;

	e = env_init("incompat");
	tu_write_text(e->conf, LONG_LIMITER("a", 5));
	fd = shm_open(e->seg, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	memset(junk, 'x', sizeof(junk));
	assert_true(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
	close(fd);
	pid = spawn(e, NULL, NULL);
	assert_int_equal(wait_exit(pid), 1);
	assert_true(tu_file_has(e->log, "is not a shmthrottle segment (magic "
	    "0x7878787878787878"));
	assert_true(tu_file_has(e->log, "--recreate"));
	pid = spawn(e, recreate, NULL);
	h = wait_ready(e, pid);
	assert_int_equal(drain(h, "a", 100), 5);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

/* Workers share one page: a stop flag, how many grants the test allows
 * them to ask for so far, and their grant counts. */
struct board {
	volatile int stop;
	volatile uint64_t allow;
	volatile uint64_t grants[4];
};

static uint64_t total(const struct board *b, int n);

static void
worker(const char *seg, struct board *b, int i)
{
	shmt_t *h;

	/* A failed test must not leave workers spinning. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (shmt_open(seg, &h) != 0)
		_exit(3);
	while (!b->stop) {
		int rc;

		if (total(b, 4) >= b->allow) {
			sched_yield();
			continue;
		}
		rc = shmt_try_use_key(h, "a");

		if (rc < 0)
			_exit(4);
		if (rc == 1)
			__atomic_fetch_add(&b->grants[i], 1, __ATOMIC_RELAXED);
	}
	shmt_close(h);
	_exit(0);
}

static uint64_t
total(const struct board *b, int n)
{
	uint64_t t = 0;

	for (int i = 0; i < n; i++)
		t += __atomic_load_n(&b->grants[i], __ATOMIC_RELAXED);
	return t;
}

/* kill -9 of the daemon while workers run: they keep working, never pass
 * the limit, use all of it; a restarted daemon takes the segment over with
 * its state. */
static void
test_kill9_restart(void **state)
{
	enum { NW = 3, LIMIT = 300 };
	struct board *b;
	pid_t pid, w[NW];
	struct env *e;
	shmt_t *h;
	int i;

	e = env_init("kill9");
	tu_write_text(e->conf, LONG_LIMITER("a", 300));
	b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(b != MAP_FAILED);
	memset(b, 0, sizeof(*b));
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	for (i = 0; i < NW; i++) {
		w[i] = fork();
		assert_true(w[i] >= 0);
		if (w[i] == 0)
			worker(e->seg, b, i);
		track(w[i]);
	}
	/* The first uses go while the daemon runs, the rest after its
	 * death; then the workers keep asking, far past the limit. */
	b->allow = 10;
	for (i = 0; i < WAIT_MS / 5 && total(b, NW) < 10; i++)
		tu_pause_ms(5);
	/* Workers race past the allowance by at most one grant each. */
	assert_true(total(b, NW) >= 10 && total(b, NW) <= 10 + NW);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	untrack(pid);
	b->allow = UINT64_MAX;
	for (i = 0; i < WAIT_MS / 5 && total(b, NW) < LIMIT; i++) {
		for (int j = 0; j < NW; j++) {
			int st;

			if (waitpid(w[j], &st, WNOHANG) == w[j] &&
			    (untrack(w[j]), 1))
				fail_msg("worker %d quit, status %#x", j, st);
		}
		tu_pause_ms(5);
	}
	if (total(b, NW) != LIMIT)
		fail_msg("workers took %" PRIu64 " of %d", total(b, NW), LIMIT);

	pid = spawn(e, NULL, NULL);
	shmt_close(h);
	h = wait_ready(e, pid);
	b->stop = 1;
	for (i = 0; i < NW; i++)
		assert_int_equal(wait_exit(w[i]), 0);
	assert_true(total(b, NW) == LIMIT);
	assert_true(in_flight(h, "a") == LIMIT);
	assert_true(tu_file_has(e->log, "taking over segment"));
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
	munmap(b, sizeof(*b));
}

static void
conf_with_snapshot(const struct env *e, const char *limiters)
{
	char text[2048];

	snprintf(text, sizeof(text), "%s[daemon]\nsnapshot = %s\n"
	    "snapshot_interval = 1h\n", limiters, e->snap);
	tu_write_text(e->conf, text);
}

/* Stop writes a snapshot; after the segment is removed, a new daemon
 * restores it and the uses in flight are still counted. */
static void
test_snapshot_roundtrip(void **state)
{
	struct stat st;
	struct env *e;
	shmt_t *h;
	pid_t pid;

	e = env_init("snap");
	conf_with_snapshot(e, LONG_LIMITER("a", 5) LONG_LIMITER("b", 9));
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	assert_int_equal(drain(h, "a", 3), 3);
	assert_int_equal(drain(h, "b", 100), 9);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
	assert_int_equal(stat(e->snap, &st), 0);
	assert_int_equal(shmt_unlink(e->seg), 0);

	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	assert_true(tu_file_has(e->log, "restored from"));
	assert_true(in_flight(h, "a") == 3 && in_flight(h, "b") == 9);
	assert_int_equal(drain(h, "a", 100), 2);
	assert_int_equal(shmt_try_use_key(h, "b"), 0);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

/* Stop writes the dictionary, the counters and the analyzer too; a new
 * daemon brings them back: live items with their values (an expired one
 * is not kept), a count of hits, the hot key.  (Expiry times across a
 * reboot are checked on an injected clock in test_daemon_snapshot.) */
static void
test_snapshot_keeps_state(void **state)
{
	shmt_hotkey_t top[4];
	char buf[16];
	struct env *e;
	uint64_t c = 0;
	size_t n = 0;
	shmt_t *h;
	pid_t pid;

	e = env_init("snapst");
	conf_with_snapshot(e, LONG_LIMITER("a", 5));
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	assert_int_equal(shmt_set(h, "kept", 4, "value", 5, 3600000), 0);
	assert_int_equal(shmt_set(h, "always", 6, "v", 1, 0), 0);
	assert_int_equal(shmt_set(h, "brief", 5, "v", 1, 1), 0);
	for (int i = 0; i < 7; i++)
		assert_int_equal(shmt_hit(h, "visits", 6, NULL), 0);
	for (int i = 0; i < 40; i++)
		assert_int_equal(shmt_get(h, "kept", 4, buf, sizeof(buf), &n), 0);
	tu_pause_ms(5);            /* "brief" expires */
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(e->seg), 0);

	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	assert_true(tu_file_has(e->log, "restored from"));
	assert_int_equal(shmt_top_keys(h, top, 4, NULL), 1);
	assert_true(top[0].lower == 40 && top[0].klen == 4 &&
	    memcmp(top[0].key, "kept", 4) == 0);
	assert_int_equal(shmt_get(h, "kept", 4, buf, sizeof(buf), &n), 0);
	assert_true(n == 5 && memcmp(buf, "value", 5) == 0);
	assert_int_equal(shmt_get(h, "always", 6, buf, sizeof(buf), &n), 0);
	assert_int_equal(shmt_get(h, "brief", 5, buf, sizeof(buf), &n),
	    -ENOENT);
	assert_int_equal(shmt_count(h, "visits", 6, 0, &c), 0);
	assert_int_equal(c, 7);
	assert_int_equal(shmt_hit(h, "visits", 6, &c), 0);
	assert_int_equal(c, 8);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

static void
copy_file(const char *from, const char *to)
{
	static char buf[1 << 16];
	FILE *in = fopen(from, "r"), *out = fopen(to, "w");
	size_t n;

	assert_non_null(in);
	assert_non_null(out);
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		assert_true(fwrite(buf, 1, n, out) == n);
	fclose(in);
	assert_int_equal(fclose(out), 0);
}

/* Damage the snapshot at E: flip one byte at OFF, or cut it to LEN. */
static void
damage(const struct env *e, long off, long len)
{
	int fd = open(e->snap, O_RDWR);
	unsigned char c;

	assert_true(fd >= 0);
	if (len >= 0) {
		assert_int_equal(ftruncate(fd, len), 0);
	} else {
		assert_true(pread(fd, &c, 1, off) == 1);
		c ^= 0x5a;
		assert_true(pwrite(fd, &c, 1, off) == 1);
	}
	close(fd);
}

/* Start with no segment and a damaged snapshot: exit 2 naming the problem;
 * with --ignore-snapshot, start empty. */
static void
expect_refused(struct env *e, const char *why)
{
	pid_t pid;

	shmt_unlink(e->seg);
	unlink(e->log);
	pid = spawn(e, NULL, NULL);
	assert_int_equal(wait_exit(pid), 2);
	if (!tu_file_has(e->log, why))
		fail_msg("log lacks \"%s\"", why);
}

static void
test_snapshot_damaged(void **state)
{
	const char *ignore[] = { "--ignore-snapshot", NULL };
	char good[512];
	struct env *e;
	shmt_t *h;
	pid_t pid;

	e = env_init("snapbad");
	conf_with_snapshot(e, LONG_LIMITER("a", 5));
	pid = spawn(e, NULL, NULL);
	h = wait_ready(e, pid);
	assert_int_equal(drain(h, "a", 4), 4);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
	snprintf(good, sizeof(good), "%s.good", e->snap);
	copy_file(e->snap, good);

	damage(e, 112 + 9000, -1);
	expect_refused(e, "image checksum mismatch");
	copy_file(good, e->snap);
	damage(e, 3, -1);
	expect_refused(e, "not a shmthrottle snapshot");
	copy_file(good, e->snap);
	damage(e, 0, 5000);
	expect_refused(e, "truncated or padded");
	damage(e, 0, 50);
	expect_refused(e, "truncated: 50 bytes");

	unlink(e->log);
	pid = spawn(e, ignore, NULL);
	h = wait_ready(e, pid);
	assert_true(tu_file_has(e->log, "ignored (--ignore-snapshot)"));
	assert_true(in_flight(h, "a") == 0);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(wait_exit(pid), 0);
	shmt_close(h);
}

/* Without -f the daemon forks; the command returns only once the daemon
 * runs, with its status, so `shmthrottled && use-the-segment` works. */
static void
test_background(void **state)
{
	shmt_segment_stat_t st;
	char cmd[1024];
	struct env *e;
	shmt_t *h;
	pid_t pid;
	int i;

	e = env_init("bg");
	tu_write_text(e->conf, LONG_LIMITER("a", 5));
	snprintf(cmd, sizeof(cmd), "%s -c %s -s %s 2>>%s", daemon_bin, e->conf,
	    e->seg, e->log);
	assert_int_equal(WEXITSTATUS(system(cmd)), 0);
	assert_int_equal(shmt_open(e->seg, &h), 0);
	assert_int_equal(shmt_segment_stat(h, &st), 0);
	assert_true(st.daemon_alive);
	pid = (pid_t)st.daemon_pid;
	track(pid);
	assert_int_equal(drain(h, "a", 100), 5);
	/* A second one fails the same way, through the parent. */
	assert_int_equal(WEXITSTATUS(system(cmd)), 1);
	assert_int_equal(kill(pid, SIGTERM), 0);
	for (i = 0; i < WAIT_MS / 5; i++) {
		assert_int_equal(shmt_segment_stat(h, &st), 0);
		if (st.daemon_pid == 0)
			break;
		tu_pause_ms(5);
	}
	assert_true(st.daemon_pid == 0);
	untrack(pid);
	shmt_close(h);
}

/* Background mode with a relative snapshot path: it is resolved against
 * the directory the daemon was started in, at start and on SIGHUP alike
 * (the daemon has done chdir("/") since), so the stop snapshot after a
 * reload lands where the start's would. */
static void
test_background_relative(void **state)
{
	shmt_segment_stat_t st;
	char cmd[1024], snap[192];
	struct env *e;
	shmt_t *h;
	pid_t pid;
	int i;

	(void)state;
	e = env_init("bgrel");
	snprintf(cmd, sizeof(cmd), "%s/sub", e->dir);
	assert_int_equal(mkdir(cmd, 0700), 0);
	snprintf(snap, sizeof(snap), "%s/sub/r.snap", e->dir);
	tu_write_text(e->conf, LONG_LIMITER("a", 5) "[daemon]\n"
	    "snapshot = sub/r.snap\nsnapshot_interval = 0s\n");
	snprintf(cmd, sizeof(cmd), "cd %s && %s -c d.conf -s %s 2>>%s",
	    e->dir, daemon_bin, e->seg, e->log);
	assert_int_equal(WEXITSTATUS(system(cmd)), 0);
	assert_int_equal(shmt_open(e->seg, &h), 0);
	assert_int_equal(shmt_segment_stat(h, &st), 0);
	pid = (pid_t)st.daemon_pid;
	track(pid);
	assert_int_equal(drain(h, "a", 2), 2);
	/* Taken in this order: the reload, then the stop. */
	assert_int_equal(kill(pid, SIGHUP), 0);
	assert_int_equal(kill(pid, SIGTERM), 0);
	for (i = 0; i < WAIT_MS / 5; i++) {
		assert_int_equal(shmt_segment_stat(h, &st), 0);
		if (st.daemon_pid == 0)
			break;
		tu_pause_ms(5);
	}
	assert_true(st.daemon_pid == 0);
	untrack(pid);
	shmt_close(h);
	if (access(snap, F_OK) != 0)
		fail_msg("no snapshot at %s after a reload and a stop", snap);
}

/* Receive notifications on FD until one holds WANT. */
static void
expect_notify(int fd, const char *want)
{
	char buf[4096];

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);

		if (n < 0)
			fail_msg("no \"%s\" notification: %s", want,
			    strerror(errno));
		buf[n] = '\0';
		if (strstr(buf, want) != NULL)
			return;
	}
}

static void
test_systemd_notify(void **state)
{
	struct sockaddr_un sa;
	struct timeval tv = { WAIT_MS / 1000, 0 };
	char env_sock[200];
	const char *envs[] = { env_sock, "WATCHDOG_USEC=50000", NULL };
	struct env *e;
	shmt_t *h;
	pid_t pid;
	int fd;

	e = env_init("notify");
	tu_write_text(e->conf, LONG_LIMITER("a", 5));
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify", e->dir);
	snprintf(env_sock, sizeof(env_sock), "NOTIFY_SOCKET=%s", sa.sun_path);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv,
	    sizeof(tv)), 0);
	pid = spawn(e, NULL, envs);
	expect_notify(fd, "READY=1");
	h = wait_ready(e, pid);
	expect_notify(fd, "WATCHDOG=1");
	expect_notify(fd, "WATCHDOG=1");
	assert_int_equal(kill(pid, SIGTERM), 0);
	expect_notify(fd, "STOPPING=1");
	assert_int_equal(wait_exit(pid), 0);
	close(fd);
	shmt_close(h);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_check_config, env_done),
		cmocka_unit_test_teardown(test_check_config_library_rules,
		    env_done),
		cmocka_unit_test_teardown(test_start_stop, env_done),
		cmocka_unit_test_teardown(test_second_refused, env_done),
		cmocka_unit_test_teardown(test_truncated, env_done),
		cmocka_unit_test_teardown(test_removed, env_done),
		cmocka_unit_test_teardown(test_untrusted, env_done),
		cmocka_unit_test_teardown(test_sighup, env_done),
		cmocka_unit_test_teardown(test_sighup_overrides, env_done),
		cmocka_unit_test_teardown(test_overrides_grow, env_done),
		cmocka_unit_test_teardown(test_sighup_undefined, env_done),
		cmocka_unit_test_teardown(test_sighup_redefine, env_done),
		cmocka_unit_test_teardown(test_sighup_modes, env_done),
		cmocka_unit_test_teardown(test_sighup_resize, env_done),
		cmocka_unit_test_teardown(test_moved_by_other, env_done),
		cmocka_unit_test_teardown(test_incompatible, env_done),
		cmocka_unit_test_teardown(test_snapshot_roundtrip, env_done),
		cmocka_unit_test_teardown(test_snapshot_keeps_state, env_done),
		cmocka_unit_test_teardown(test_snapshot_damaged, env_done),
		cmocka_unit_test_teardown(test_systemd_notify, env_done),
		cmocka_unit_test_teardown(test_background, env_done),
		cmocka_unit_test_teardown(test_background_relative, env_done),
	};
	const struct CMUnitTest stress[] = {
		cmocka_unit_test_teardown(test_kill9_restart, env_done),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s SHMTHROTTLED [unit|stress]\n", argv[0]);
		return 2;
	}
	daemon_bin = argv[1];
	/* The kill -9 test is the stress tier; the others are unit tests. */
	if (argc > 2 && strcmp(argv[2], "stress") == 0)
		return cmocka_run_group_tests(stress, NULL, NULL);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
