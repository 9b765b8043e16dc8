/* SPDX-License-Identifier: MIT */
/*
 * The daemon's metrics endpoint, end to end: a real shmthrottled listening
 * on a loopback port it picks itself (port 0, read back from its log), a
 * real HTTP client (curl), the answer checked line by line against the
 * text exposition format by the parser below and by `promtool check
 * metrics`, and its values against grants, denials and items the test made
 * itself.  argv: SHMTHROTTLED CURL [PROMTOOL] (no PROMTOOL: the format is
 * checked by the parser here only, and the test says so).  Every wait
 * polls with a bounded number of retries.
 */
#include "testutil.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *daemon_bin, *curl_bin, *promtool_bin;

/* Poll every 5 ms, at most this long (sanitizer builds are slow). */
#define WAIT_MS 20000

struct env {
	char dir[64];
	char seg[128];
	char conf[128];
	char log[128];
	char out[128];        /* the body of the last request */
	char url[128];        /* http://HOST:PORT/metrics */
	pid_t pid;            /* the daemon, 0 when reaped */
};

static struct env the_env;

static struct env *
env_init(const char *tag)
{
	struct env *e = &the_env;

	memset(e, 0, sizeof(*e));
	tu_tmpdir(e->dir, sizeof(e->dir), "metrics");
	tu_segname(e->seg, sizeof(e->seg), tag);
	snprintf(e->conf, sizeof(e->conf), "%.63s/d.conf", e->dir);
	snprintf(e->log, sizeof(e->log), "%.63s/d.log", e->dir);
	snprintf(e->out, sizeof(e->out), "%.63s/body", e->dir);
	return e;
}

static int
env_done(void **state)
{
	struct env *e = &the_env;
	int rc;

	if (e->pid > 0) {
		kill(e->pid, SIGKILL);
		waitpid(e->pid, NULL, 0);
		e->pid = 0;
	}
	if (e->dir[0] == '\0')
		return 0;
	shmt_unlink(e->seg);
	rc = tu_rmdir(e->dir);
	e->dir[0] = '\0';
	return rc;
}

static int
log_has(const struct env *e, const char *needle)
{
	return tu_file_has(e->log, needle);
}

static void
spawn(struct env *e)
{
	e->pid = tu_daemon_spawn(daemon_bin, e->conf, e->seg, e->log, NULL,
	    NULL);
}

/* Wait for the daemon to exit; returns its exit status. */
static int
wait_exit(struct env *e)
{
	return tu_wait_exit(&e->pid, WAIT_MS);
}

/* Wait until the daemon runs and says where its metrics are; fills
 * E->url and returns a handle on the segment. */
static shmt_t *
wait_metrics(struct env *e)
{
	const char *tag = "metrics on http://";
	shmt_t *h = NULL;
	int st;

	for (int i = 0; i < WAIT_MS / 5; i++) {
		if (waitpid(e->pid, &st, WNOHANG) == e->pid) {
			e->pid = 0;
			fail_msg("the daemon exited early (status %d)", st);
		}
		if (log_has(e, "running on segment") &&
		    shmt_open(e->seg, &h) == 0)
			break;
		tu_pause_ms(5);
	}
	assert_non_null(h);
	{
		char *text = tu_read_all(e->log);
		char *p = strstr(text, tag);
		size_t n;

		assert_non_null(p);
		p += strlen("metrics on ");
		n = strcspn(p, " \n");
		assert_true(n < sizeof(e->url));
		memcpy(e->url, p, n);
		e->url[n] = '\0';
		free(text);
	}
	return h;
}

/* Request PATH of the daemon's server with METHOD; the body goes to
 * E->out.  Returns the HTTP status, 0 when no connection was made.
 * TYPE (may be NULL) receives the Content-Type. */
static int
request(struct env *e, const char *method, const char *path, char *type,
    size_t cap)
{
	char cmd[1024], base[128], meta[160], *text;
	int status = -1, rc;

	snprintf(base, sizeof(base), "%s", e->url);
	*strrchr(base, '/') = '\0';
	snprintf(meta, sizeof(meta), "%s/meta", e->dir);
	snprintf(cmd, sizeof(cmd), "'%s' -sS --max-time 10 -X %s -o '%s' "
	    "-w '%%{http_code} %%{content_type}' '%s%s' >'%s' 2>>'%s'",
	    curl_bin, method, e->out, base, path, meta, e->log);
	rc = system(cmd);
	assert_true(rc != -1 && WIFEXITED(rc));
	text = tu_read_all(meta);
	assert_int_equal(sscanf(text, "%d", &status), 1);
	if (type != NULL)
		snprintf(type, cap, "%s", strchr(text, ' ') != NULL ?
		    strchr(text, ' ') + 1 : "");
	free(text);
	return status;
}

/* ---- The exposition format ----------------------------------------------- */

static int
name_ok(const char *s, size_t n)
{
	if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_' ||
	    s[0] == ':'))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == ':'))
			return 0;
	return 1;
}

/* The labels of a sample, "{...}" from P; returns the end or NULL. */
static const char *
labels_end(const char *p)
{
	assert_true(*p == '{');
	p++;
	while (*p != '}') {
		const char *n = p;

		while (isalnum((unsigned char)*p) || *p == '_')
			p++;
		if (!name_ok(n, (size_t)(p - n)) || p[0] != '=' || p[1] != '"')
			return NULL;
		for (p += 2; *p != '"'; p++) {
			if (*p == '\0' || *p == '\n')
				return NULL;
			if (*p == '\\' && (p[1] == '\\' || p[1] == '"' ||
			    p[1] == 'n'))
				p++;
			else if (*p == '\\')
				return NULL;
		}
		p++;
		if (*p == ',')
			p++;
		else if (*p != '}')
			return NULL;
	}
	return p + 1;
}

/*
 * Check TEXT against the text format (version 0.0.4) as promtool reads it:
 * every line a HELP, a TYPE or a sample; a family's HELP and TYPE before
 * its samples and its samples together; counters end in _total; histogram
 * samples are _bucket (with le), _sum and _count; no series twice.
 * Returns the number of samples.
 */
static int
check_format(const char *text)
{
	static char seen[512][128], series[2048][256];
	char family[128] = "", type[16] = "";
	int nfam = 0, nseries = 0;

	for (const char *line = text; *line != '\0';) {
		const char *eol = strchr(line, '\n');
		size_t len;

		assert_non_null(eol); /* every line ends in \n */
		len = (size_t)(eol - line);
		assert_true(len > 0);
		if (strncmp(line, "# HELP ", 7) == 0 ||
		    strncmp(line, "# TYPE ", 7) == 0) {
			const char *n = line + 7;
			size_t nl = strcspn(n, " \n");
			char name[128];

			assert_true(name_ok(n, nl) && nl < sizeof(name));
			memcpy(name, n, nl);
			name[nl] = '\0';
			if (strcmp(name, family) != 0) {
				for (int i = 0; i < nfam; i++)
					if (strcmp(seen[i], name) == 0)
						fail_msg("family %s twice", name);
				assert_true(nfam < 512);
				snprintf(seen[nfam++], sizeof(seen[0]), "%s", name);
				snprintf(family, sizeof(family), "%s", name);
				type[0] = '\0';
			}
			if (line[2] == 'T') {
				sscanf(n + nl, " %15s", type);
				assert_true(strcmp(type, "counter") == 0 ||
				    strcmp(type, "gauge") == 0 ||
				    strcmp(type, "histogram") == 0);
				if (strcmp(type, "counter") == 0)
					assert_true(nl > 6 && strcmp(name + nl - 6,
					    "_total") == 0);
			}
		} else {
			const char *p = line, *v;
			size_t nl = 0;
			char *end;
			double val;

			assert_true(line[0] != '#');
			while (isalnum((unsigned char)p[nl]) || p[nl] == '_' ||
			    p[nl] == ':')
				nl++;
			assert_true(name_ok(p, nl));
			assert_true(type[0] != '\0'); /* HELP/TYPE came first */
			if (strcmp(type, "histogram") == 0) {
				size_t fl = strlen(family);

				assert_true(nl > fl && strncmp(p, family, fl) == 0);
				assert_true(strncmp(p + fl, "_bucket", nl - fl) == 0 ||
				    strncmp(p + fl, "_sum", nl - fl) == 0 ||
				    strncmp(p + fl, "_count", nl - fl) == 0);
				if (strncmp(p + fl, "_bucket", 7) == 0)
					assert_non_null(strstr(line, "le=\""));
			} else {
				assert_true(nl == strlen(family) &&
				    strncmp(p, family, nl) == 0);
			}
			v = p + nl;
			if (*v == '{') {
				v = labels_end(v);
				assert_non_null(v);
			}
			assert_true(*v == ' ');
			errno = 0;
			val = strtod(v + 1, &end);
			assert_true(end == eol && errno == 0 && !isnan(val));
			assert_true((size_t)(v - line) < sizeof(series[0]));
			for (int i = 0; i < nseries; i++)
				if (strncmp(series[i], line, (size_t)(v - line)) == 0 &&
				    series[i][v - line] == '\0')
					fail_msg("series twice: %.*s", (int)len, line);
			assert_true(nseries < 2048);
			memcpy(series[nseries], line, (size_t)(v - line));
			series[nseries++][v - line] = '\0';
		}
		line = eol + 1;
	}
	return nseries;
}

/* The value of the one sample named exactly SERIES ("name{labels}"). */
static double
value_of(const char *text, const char *series)
{
	size_t n = strlen(series);
	const char *found = NULL;

	for (const char *line = text; *line != '\0';) {
		const char *eol = strchr(line, '\n');

		if (strncmp(line, series, n) == 0 && line[n] == ' ') {
			if (found != NULL)
				fail_msg("%s twice", series);
			found = line + n + 1;
		}
		line = eol + 1;
	}
	if (found == NULL)
		fail_msg("no sample %s", series);
	return strtod(found, NULL);
}

static int
has_series(const char *text, const char *prefix)
{
	return strstr(text, prefix) != NULL;
}

/* ---- Tests ---------------------------------------------------------------- */

#define CONF_LIMITERS \
	"[limiter a]\nlimit = 5\nwindow = 1h\nslack_time = 1m\n" \
	"slack_uses = 1\n" \
	"[limiter pc]\nper_client = yes\ncapacity = 64\nlimit = 2\n" \
	"window = 1h\nslack_time = 1m\nslack_uses = 1\n" \
	"[dictionary]\nenabled = yes\nsize = 4MiB\nshards = 2\n"

/* The values in a scrape are those of the segment: grants and denials
 * the test made, items it set, a label that needs escaping, and a lag
 * histogram whose buckets add up. */
static void
test_scrape(void **state)
{
	static const char odd[] = "we\"ird%\\x\n";
	shmt_limit_t lim = { .limit = 3, .window_ns = 3600000000000ULL,
		.slack_ns = 60000000000ULL, .slack_uses = 1 };
	char type[128], series[256], *text;
	shmt_segment_stat_t st;
	shmt_limiter_stat_t ls;
	struct env *e = env_init("metrics");
	double prev = 0, count;
	uint64_t runs0;
	int granted = 0, n;
	shmt_t *h;

	tu_write_text(e->conf, CONF_LIMITERS
	    "[daemon]\nmetrics = 127.0.0.1:0\n");
	spawn(e);
	h = wait_metrics(e);
	assert_true(strncmp(e->url, "http://127.0.0.1:", 17) == 0);
	assert_true(strcmp(e->url, "http://127.0.0.1:0/metrics") != 0);

	/* Known traffic: 7 tries on a (limit 5), 3 for one client of pc
	 * (limit 2), 3 items, and a limiter whose name needs escaping. */
	for (int i = 0; i < 7; i++)
		granted += shmt_try_use_key(h, "a") == 1;
	assert_int_equal(granted, 5);
	for (int i = 0; i < 3; i++)
		(void)shmt_try_use(h, "pc", "client-1", 8);
	/* Overrides: one client denied, one allowed. */
	{
		shmt_client_rule_t deny = { .kind = SHMT_RULE_DENY };
		shmt_client_rule_t allow = { .kind = SHMT_RULE_ALLOW };

		assert_int_equal(shmt_client_set(h, "pc", "bad", 3, &deny), 0);
		assert_int_equal(shmt_client_set(h, "pc", "vip", 3, &allow), 0);
		assert_int_equal(shmt_try_use(h, "pc", "bad", 3), 0);
		for (int i = 0; i < 4; i++)
			assert_int_equal(shmt_try_use(h, "pc", "vip", 3), 1);
	}
	for (int i = 0; i < 3; i++) {
		char k[8];

		snprintf(k, sizeof(k), "k%d", i);
		assert_int_equal(shmt_set(h, k, strlen(k), "v", 1, 0), 0);
	}
	assert_int_equal(shmt_limiter_define(h, odd, &lim), 0);
	assert_int_equal(shmt_try_use_key(h, odd), 1);
	/* The lag histogram counts housekeeping runs, and a run reclaims
	 * the entries of pc's clients that hold no use (bad's and vip's:
	 * a rule's decision takes none), leaving client-1's.  Wait for two
	 * runs past the count read after the calls: the first of them may
	 * have begun before the calls, the second began after them.  (Two
	 * runs since the start were not enough: when the daemon had run
	 * twice before the calls, as it does when the test is delayed a
	 * second or more, the scrape found 3 entries in use, not 1.) */
	assert_int_equal(shmt_segment_stat(h, &st), 0);
	runs0 = st.housekeeping_runs;
	for (int i = 0; i < WAIT_MS / 5; i++) {
		assert_int_equal(shmt_segment_stat(h, &st), 0);
		if (st.housekeeping_runs >= runs0 + 2)
			break;
		tu_pause_ms(5);
	}
	assert_true(st.housekeeping_runs >= runs0 + 2);
	assert_true(st.housekeeping_runs >= 2);

	assert_int_equal(request(e, "GET", "/metrics", type, sizeof(type)),
	    200);
	assert_non_null(strstr(type, "text/plain"));
	assert_non_null(strstr(type, "version=0.0.4"));
	text = tu_read_all(e->out);
	n = check_format(text);
	assert_true(n > 20);

	assert_true(value_of(text, "shmthrottle_grants_total{limiter=\"a\"}")
	    == 5);
	assert_true(value_of(text, "shmthrottle_denials_total{limiter=\"a\","
	    "reason=\"exhausted\"}") == 2);
	assert_true(value_of(text, "shmthrottle_denials_total{limiter=\"a\","
	    "reason=\"slack\"}") == 0);
	assert_true(value_of(text, "shmthrottle_in_flight_uses{limiter=\"a\"}")
	    == 5);
	assert_true(value_of(text, "shmthrottle_free_uses{limiter=\"a\"}") == 0);
	assert_true(value_of(text, "shmthrottle_limit_uses{limiter=\"a\"}") == 5);
	assert_true(value_of(text, "shmthrottle_window_seconds{limiter=\"a\"}")
	    == 3600);
	assert_int_equal(shmt_limiter_stat(h, "a", &ls), 0);
	assert_true(value_of(text, "shmthrottle_buckets_in_use{limiter=\"a\"}")
	    == ls.buckets_in_use && ls.buckets_in_use > 0);
	assert_true(value_of(text, "shmthrottle_grants_total{limiter=\"pc\"}")
	    == 2);
	assert_true(value_of(text, "shmthrottle_denials_total{limiter=\"pc\","
	    "reason=\"exhausted\"}") == 1);
	assert_true(value_of(text, "shmthrottle_denials_total{limiter=\"pc\","
	    "reason=\"rule\"}") == 1);
	assert_true(value_of(text,
	    "shmthrottle_allowed_by_rule_total{limiter=\"pc\"}") == 4);
	assert_true(value_of(text,
	    "shmthrottle_overrides_in_use{limiter=\"pc\"}") == 2);
	assert_true(value_of(text, "shmthrottle_clients_in_use{limiter=\"pc\"}")
	    == 1);
	assert_false(has_series(text, "shmthrottle_free_uses{limiter=\"pc\"}"));
	/* Escaping: '"' and '\' as the format says, '%' and control bytes
	 * as %XX, so the name maps back to one limiter. */
	assert_true(value_of(text, "shmthrottle_grants_total{limiter="
	    "\"we\\\"ird%25\\\\x%0A\"}") == 1);

	assert_true(value_of(text, "shmthrottle_dict_items") == 3);
	assert_true(value_of(text, "shmthrottle_dict_bytes") >= 4 << 20);
	assert_true(value_of(text, "shmthrottle_dict_evictions_total") == 0);
	assert_true(value_of(text, "shmthrottle_dict_expirations_total") == 0);
	assert_true(value_of(text, "shmthrottle_dict_repairs_total") == 0);
	assert_true(value_of(text, "shmthrottle_limiters") == 3);
	assert_true(value_of(text, "shmthrottle_slots_in_use") >= 2);
	assert_true(value_of(text, "shmthrottle_slots") == st.max_slots);
	snprintf(series, sizeof(series), "shmthrottle_segment_info{format="
	    "\"0x%016" PRIx64 "\",abi=\"%u\",version=\"%s\"}", st.format,
	    st.abi_version, shmt_version());
	assert_true(value_of(text, series) == 1);

	/* The histogram: cumulative buckets, +Inf equal to the count, at
	 * least the two runs seen above. */
	count = value_of(text, "shmthrottle_daemon_housekeeping_lag_seconds_count");
	assert_true(count >= 2);
	for (const char *p = text; (p = strstr(p,
	    "shmthrottle_daemon_housekeeping_lag_seconds_bucket{le=\"")) != NULL;
	    p++) {
		double v = strtod(strchr(p, ' ') + 1, NULL);

		assert_true(v >= prev);
		prev = v;
	}
	assert_true(prev == count);
	assert_true(value_of(text, "shmthrottle_daemon_housekeeping_lag_seconds_"
	    "bucket{le=\"+Inf\"}") == count);
	free(text);

	if (promtool_bin != NULL && promtool_bin[0] != '\0') {
		char cmd[512];

		snprintf(cmd, sizeof(cmd), "'%s' check metrics < '%s' >&2",
		    promtool_bin, e->out);
		assert_int_equal(system(cmd), 0);
	} else {
		print_message("promtool not found: the format was checked by "
		    "this test's own parser only\n");
	}

	/* HEAD answers like GET; other paths and methods are refused. */
	assert_int_equal(request(e, "HEAD", "/metrics", NULL, 0), 200);
	assert_int_equal(request(e, "GET", "/", NULL, 0), 404);
	assert_int_equal(request(e, "POST", "/metrics", NULL, 0), 405);

	/* A reload keeps the endpoint where it is, and says so. */
	tu_write_text(e->conf, CONF_LIMITERS "[daemon]\nmetrics = 127.0.0.1:1\n");
	assert_int_equal(kill(e->pid, SIGHUP), 0);
	for (int i = 0; i < WAIT_MS / 5 && !log_has(e, "reloaded:"); i++)
		tu_pause_ms(5);
	assert_true(log_has(e, "[daemon] metrics changed to '127.0.0.1:1': "
	    "ignored until restart"));
	assert_int_equal(request(e, "GET", "/metrics", NULL, 0), 200);

	/* Stopped, the daemon no longer listens. */
	assert_int_equal(kill(e->pid, SIGTERM), 0);
	assert_int_equal(wait_exit(e), 0);
	assert_int_equal(request(e, "GET", "/metrics", NULL, 0), 0);
	shmt_close(h);
}

/* Off by default; a bad address is a config error with its line; an
 * address in use stops the start with the reason. */
static void
test_config(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	char text[512], cmd[512];
	struct env *e = env_init("metricscfg");
	shmt_t *h;
	int fd;

	tu_write_text(e->conf, CONF_LIMITERS);
	spawn(e);
	for (int i = 0; i < WAIT_MS / 5 && !log_has(e, "running on"); i++)
		tu_pause_ms(5);
	assert_true(log_has(e, "running on segment"));
	assert_false(log_has(e, "metrics on"));
	assert_int_equal(kill(e->pid, SIGTERM), 0);
	assert_int_equal(wait_exit(e), 0);

	static const char *const bad[] = { "localhost:9464", "127.0.0.1",
		"127.0.0.1:65536", "127.0.0.1:-1", "[::1:9464", "::1:9464",
		"127.0.0.1:94x4" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), CONF_LIMITERS "[daemon]\n"
		    "metrics = %s\n", bad[i]);
		tu_write_text(e->conf, text);
		snprintf(cmd, sizeof(cmd), "'%s' --check-config '%s' "
		    ">/dev/null 2>'%s'", daemon_bin, e->conf, e->log);
		assert_int_equal(WEXITSTATUS(system(cmd)), 2);
		assert_true(log_has(e, "key 'metrics': cannot read"));
	}
	snprintf(text, sizeof(text), CONF_LIMITERS "[daemon]\n"
	    "metrics = [::1]:9464\n");
	tu_write_text(e->conf, text);
	snprintf(cmd, sizeof(cmd), "'%s' --check-config '%s' | grep -q "
	    "'^metrics = \\[::1\\]:9464$'", daemon_bin, e->conf);
	assert_int_equal(system(cmd), 0);

	/* A port someone else listens on. */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 1), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	snprintf(text, sizeof(text), CONF_LIMITERS "[daemon]\n"
	    "metrics = 127.0.0.1:%u\n", ntohs(sa.sin_port));
	tu_write_text(e->conf, text);
	spawn(e);
	assert_int_equal(wait_exit(e), 1);
	assert_true(log_has(e, "cannot listen on 127.0.0.1:"));
	assert_true(log_has(e, "Address already in use"));
	close(fd);
	/* The failed start left the segment free for the next daemon. */
	assert_int_equal(shmt_open(e->seg, &h), 0);
	{
		shmt_segment_stat_t st;

		assert_int_equal(shmt_segment_stat(h, &st), 0);
		assert_true(st.daemon_pid == 0);
	}
	shmt_close(h);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_scrape, env_done),
		cmocka_unit_test_teardown(test_config, env_done),
	};

	if (argc < 3) {
		fprintf(stderr, "usage: %s SHMTHROTTLED CURL [PROMTOOL]\n",
		    argv[0]);
		return 2;
	}
	daemon_bin = argv[1];
	curl_bin = argv[2];
	promtool_bin = argc > 3 ? argv[3] : NULL;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
