/* SPDX-License-Identifier: MIT */
/*
 * watch: a live full-screen view like top(1).  Every frame reads the
 * segment's and each limiter's stats, derives operations per second from
 * the counters, and keeps that history in this process for the sparklines;
 * below the limiters, the hottest keys of the analyzer's window.
 *
 * The terminal: raw input (no echo, no line buffering; signals stay on, so
 * Ctrl-C is SIGINT), the alternate screen and a hidden cursor.  All of it is
 * undone on every way out: 'q', -n, an error, and SIGINT, SIGTERM, SIGHUP
 * (after which the signal is raised again, so the parent sees the death it
 * asked for).  Plain ANSI escapes, no curses: the view is a few lines
 * redrawn in place, which needs nothing terminfo knows beyond ANSI.
 */
#include "cli.h"
#include "util.h"

#include "fmt.h"
#include "hot.h"
#include "limlist.h"

#include <errno.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

/* The sparkline spans this much history; a frame every second fills it
 * with 300 samples, more than any terminal is wide. */
#define SPAN_NS (300ULL * 1000000000ULL)
#define HIST_MAX 4096
#define BAR_WIDTH 20
#define NAME_WIDTH 20
/* The hot-keys panel: its rows (top(1)'s habit of a short list that fits
 * beside the rest) and the width a key's name is cut to. */
#define HOT_ROWS 5
#define HOT_NAME_WIDTH 32

struct sample {
	shmt_time_t t;
	double ops;
};

struct hist {
	char name[SHMT_LIMITER_NAME_MAX + 1];
	struct sample s[HIST_MAX];
	size_t head, n;
	uint64_t last_total;   /* grants + denials at the last frame */
	shmt_time_t last_t;
	double ops;            /* the latest rate, < 0 before two frames */
	int seen;              /* present in the latest frame */
};

struct watch {
	shmt_t *h;
	uint64_t delay_ns;
	long frames;           /* 0: until q or a signal */
	int tty_out, tty_in, utf8;
	int rows, cols;
	struct hist **hist;
	size_t nhist;
};

/* ---- the terminal ------------------------------------------------------ */

static struct termios term_saved;
static int term_raw, term_screen;
static volatile sig_atomic_t got_signal, got_winch;

static void
term_write(const char *s)
{
	size_t len = strlen(s);

	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, s, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		s += n;
		len -= (size_t)n;
	}
}

/* Async-signal-safe: only write(2) and tcsetattr(3). */
static void
term_restore(void)
{
	if (term_screen) {
		term_write("\033[?25h\033[?1049l");
		term_screen = 0;
	}
	if (term_raw) {
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &term_saved);
		term_raw = 0;
	}
}

static int
term_setup(const struct watch *w)
{
	if (w->tty_in) {
		struct termios raw;

		if (tcgetattr(STDIN_FILENO, &term_saved) != 0)
			return -errno;
		raw = term_saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 1;
		raw.c_cc[VTIME] = 0;
		if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) != 0)
			return -errno;
		term_raw = 1;
	}
	if (w->tty_out) {
		term_write("\033[?1049h\033[?25l\033[H\033[2J");
		term_screen = 1;
	}
	atexit(term_restore);
	return 0;
}

static void
on_signal(int sig)
{
	if (sig == SIGWINCH)
		got_winch = 1;
	else
		got_signal = sig;
}

/* Catch the signals with the given mask blocked: they are delivered only
 * inside ppoll(), so none slips in between a check and the wait. */
static void
signals_setup(sigset_t *waitmask)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGWINCH };
	struct sigaction sa;
	sigset_t block;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&block);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		sigaction(sigs[i], &sa, NULL);
		sigaddset(&block, sigs[i]);
	}
	sigprocmask(SIG_BLOCK, &block, waitmask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigdelset(waitmask, sigs[i]);
}

static void
term_size(struct watch *w)
{
	struct winsize ws;

	/* Without a terminal nothing cuts the lines: 120 columns leave the
	 * sparkline room in a log file. */
	w->rows = 24;
	w->cols = w->tty_out ? 80 : 120;
	if (w->tty_out && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 &&
	    ws.ws_row > 0 && ws.ws_col > 0) {
		w->rows = ws.ws_row;
		w->cols = ws.ws_col;
	}
}

/* ---- history ----------------------------------------------------------- */

static struct hist *
hist_find(struct watch *w, const char *name)
{
	struct hist **p, *hs;

	for (size_t i = 0; i < w->nhist; i++)
		if (strcmp(w->hist[i]->name, name) == 0)
			return w->hist[i];
	p = realloc(w->hist, (w->nhist + 1) * sizeof(*p));
	if (p == NULL)
		return NULL;
	w->hist = p;
	hs = calloc(1, sizeof(*hs));
	if (hs == NULL)
		return NULL;
	snprintf(hs->name, sizeof(hs->name), "%s", name);
	hs->ops = -1;
	w->hist[w->nhist++] = hs;
	return hs;
}

static void
hist_update(struct hist *hs, const shmt_limiter_stat_t *l, shmt_time_t now)
{
	uint64_t total = l->grants + l->denied_exhausted + l->denied_slack +
	    l->denied_table_full;

	if (hs->last_t != 0 && now > hs->last_t && total >= hs->last_total) {
		hs->ops = (double)(total - hs->last_total) * 1e9 /
		    (double)(now - hs->last_t);
		hs->s[hs->head].t = now;
		hs->s[hs->head].ops = hs->ops;
		hs->head = (hs->head + 1) % HIST_MAX;
		if (hs->n < HIST_MAX)
			hs->n++;
	}
	hs->last_total = total;
	hs->last_t = now;
	hs->seen = 1;
}

/* The sparkline of HS over the last SPAN_NS in WIDTH columns: each column
 * shows the highest rate among its samples, scaled to the highest of all;
 * a column without samples stays blank. */
static void
sparkline(FILE *f, const struct hist *hs, shmt_time_t now, int width,
    int utf8)
{
	static const char *const blocks[] = { "\u2581", "\u2582", "\u2583",
		"\u2584", "\u2585", "\u2586", "\u2587", "\u2588" };
	static const char ascii[] = "_.-:=+*#";
	double col[512], top = 0;
	int have[512] = { 0 };

	if (width > 512)
		width = 512;
	for (size_t i = 0; i < hs->n; i++) {
		const struct sample *s = &hs->s[(hs->head + HIST_MAX - 1 - i) %
		    HIST_MAX];
		uint64_t age = now - s->t;
		int k;

		if (s->t > now || age >= SPAN_NS)
			break;
		k = width - 1 - (int)(age * (uint64_t)width / SPAN_NS);
		if (!have[k] || s->ops > col[k])
			col[k] = s->ops;
		have[k] = 1;
		if (s->ops > top)
			top = s->ops;
	}
	for (int k = 0; k < width; k++) {
		int lv = !have[k] || top <= 0 ? 0 :
		    (int)lround(col[k] / top * 7.0);

		if (!have[k])
			fputc(' ', f);
		else if (utf8)
			fputs(blocks[lv], f);
		else
			fputc(ascii[lv], f);
	}
}

/* ---- one frame ---------------------------------------------------------- */

static void
fmt_ops(char *buf, size_t cap, double ops)
{
	if (ops < 0)
		snprintf(buf, cap, "-");
	else if (ops >= 1e6)
		snprintf(buf, cap, "%.1fM", ops / 1e6);
	else if (ops >= 1e4)
		snprintf(buf, cap, "%.1fk", ops / 1e3);
	else
		snprintf(buf, cap, "%.1f", ops);
}

/* Write LINE cut to the terminal's width, then the end of line. */
static void
put_line(FILE *f, const struct watch *w, const char *line)
{
	fprintf(f, "%.*s%s\n", w->cols, line, w->tty_out ? "\033[K" : "");
}

static void
frame_header(FILE *f, const struct watch *w, const shmt_segment_stat_t *st,
    shmt_time_t now, double total_ops)
{
	char line[512], daemon[160], age[SHMTC_FMT_MAX], ops[24], when[16];
	time_t t = time(NULL);
	struct tm tm;

	if (st->daemon_pid == 0)
		snprintf(daemon, sizeof(daemon), "daemon down (never ran)");
	else
		snprintf(daemon, sizeof(daemon), "daemon %s (pid %lld, "
		    "heartbeat %s ago)", st->daemon_alive ? "up" : "down",
		    (long long)st->daemon_pid, shmtc_fmt_dur(age, sizeof(age),
		    st->daemon_heartbeat_ns && st->daemon_heartbeat_ns <= now ?
		    now - st->daemon_heartbeat_ns : 0));
	localtime_r(&t, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	snprintf(line, sizeof(line), "shmthrottle watch  %s  %s  %s",
	    shmt_name(w->h), daemon, when);
	put_line(f, w, line);
	fmt_ops(ops, sizeof(ops), total_ops);
	snprintf(line, sizeof(line), "slots %u/%u (%u stale)  limiters %u/%u  "
	    "ops/s %s  every %s%s", st->slots, st->max_slots, st->slots_stale,
	    st->limiters, st->max_limiters, ops,
	    shmtc_fmt_dur(age, sizeof(age), w->delay_ns),
	    w->tty_in ? "  q quits" : "");
	put_line(f, w, line);
	put_line(f, w, "");
	snprintf(line, sizeof(line), "%-*s %-*s %4s  %17s  %8s  LAST 5m (ops/s)",
	    NAME_WIDTH, "NAME", BAR_WIDTH + 2, "USED", "", "IN FLIGHT/LIMIT",
	    "OPS/S");
	put_line(f, w, line);
}

/* A bar of BAR_WIDTH cells, FILL of them full. */
static void
bar_fill(char *bar, int fill)
{
	if (fill < 0)
		fill = 0;
	if (fill > BAR_WIDTH)
		fill = BAR_WIDTH;
	memset(bar, '#', (size_t)fill);
	memset(bar + fill, '.', (size_t)(BAR_WIDTH - fill));
	bar[BAR_WIDTH] = '\0';
}

static void
frame_row(FILE *f, const struct watch *w, const shmt_limiter_stat_t *l,
    const struct hist *hs, shmt_time_t now)
{
	uint64_t used = l->per_client ? l->clients_in_use : l->in_flight;
	uint64_t whole = l->per_client ? l->client_capacity : l->limit;
	char bar[BAR_WIDTH + 1], pct[8], amount[48], ops[24], line[512];
	int room;

	bar_fill(bar, whole ? (int)((used * BAR_WIDTH + whole / 2) / whole) : 0);
	shmtc_fmt_pct(pct, sizeof(pct), used, whole);
	snprintf(amount, sizeof(amount), "%llu/%llu%s",
	    (unsigned long long)used, (unsigned long long)whole,
	    l->per_client ? " cl" : "");
	fmt_ops(ops, sizeof(ops), hs ? hs->ops : -1);
	snprintf(line, sizeof(line), "%-*.*s [%s] %4s  %17s  %8s  ", NAME_WIDTH,
	    NAME_WIDTH, l->name, bar, pct, amount, ops);
	room = w->cols - (int)strlen(line);
	if (room < 4 || hs == NULL) {
		put_line(f, w, line);
		return;
	}
	fputs(line, f);
	sparkline(f, hs, now, room, w->utf8);
	fputs(w->tty_out ? "\033[K\n" : "\n", f);
}

struct hot_panel {
	int rc;                 /* keys hot, or a negative error */
	shmt_hotkey_t *v;
	size_t n;
	shmt_top_info_t info;
};

/* The lines the panel takes: a blank one, its title, a row per key (or
 * one saying there is none). */
static size_t
hot_lines(const struct hot_panel *p)
{
	return p->rc < 0 ? 2 : 2 + (p->n > 0 ? p->n : 1);
}

static void
hot_panel(FILE *f, const struct watch *w, const struct hot_panel *p)
{
	char line[512], span[SHMTC_FMT_MAX], pct[16], bar[BAR_WIDTH + 1];

	put_line(f, w, "");
	if (p->rc == -ENODEV) {
		put_line(f, w, "HOT KEYS  none (created without the analyzer)");
		return;
	}
	if (p->rc < 0) {
		snprintf(line, sizeof(line), "HOT KEYS  %s",
		    shmt_strerror(p->rc));
		put_line(f, w, line);
		return;
	}
	snprintf(line, sizeof(line), "HOT KEYS  last %s, %llu requests, "
	    "threshold %s%s", shmtc_fmt_dur(span, sizeof(span),
	    p->info.span_end_ns - p->info.span_start_ns),
	    (unsigned long long)p->info.total,
	    shmtc_hot_pct_ppm(pct, sizeof(pct), p->info.threshold_ppm),
	    (size_t)p->rc > p->n ? "  (top shows all)" : "");
	put_line(f, w, line);
	if (p->n == 0)
		put_line(f, w, "(no key over the threshold)");
	for (size_t i = 0; i < p->n; i++) {
		const shmt_hotkey_t *k = &p->v[i];
		char *name = shmtc_hot_name(k);

		bar_fill(bar, (int)lround(k->share * BAR_WIDTH));
		snprintf(line, sizeof(line), "%-6s %-*.*s [%s] %5.1f%%  "
		    "%llu..%llu", shmtc_hot_kind(k->kind), HOT_NAME_WIDTH,
		    HOT_NAME_WIDTH, name ? name : "?", bar, k->share * 100,
		    (unsigned long long)k->lower, (unsigned long long)k->upper);
		put_line(f, w, line);
		free(name);
	}
}

/* Compose one frame in memory and write it with one write(2), so the
 * terminal never shows half a frame. */
static int
frame(struct watch *w)
{
	shmt_limiter_stat_t *v = NULL;
	shmt_segment_stat_t st;
	struct hot_panel hp;
	char *buf = NULL;
	size_t len = 0, n = 0, shown, room;
	double total = -1;
	FILE *f;
	shmt_time_t now;
	int rc;

	if ((rc = shmt_segment_stat(w->h, &st)) != 0 ||
	    (rc = shmtc_limiter_list(w->h, &v, &n)) != 0)
		return rc;
	now = shmt_now(w->h);
	for (size_t i = 0; i < n; i++) {
		struct hist *hs = hist_find(w, v[i].name);

		if (hs == NULL)
			continue;
		hist_update(hs, &v[i], now);
		if (hs->ops >= 0)
			total = (total < 0 ? 0 : total) + hs->ops;
	}
	/* A segment without the analyzer, or one that cannot answer now,
	 * still shows its limiters: the panel says why it is empty. */
	hp.rc = shmtc_hot_read(w->h, HOT_ROWS, &hp.v, &hp.n, &hp.info);
	if ((f = open_memstream(&buf, &len)) == NULL) {
		free(hp.v);
		free(v);
		return -ENOMEM;
	}
	if (w->tty_out)
		fputs("\033[H", f);
	frame_header(f, w, &st, now, total);
	/* Four lines of header, one for "more" and the hot-keys panel leave
	 * the rest to rows; one limiter is always shown. */
	room = w->rows > 5 + (int)hot_lines(&hp) ?
	    (size_t)w->rows - 5 - hot_lines(&hp) : 1;
	shown = w->tty_out && n > room ? room : n;
	for (size_t i = 0; i < shown; i++)
		frame_row(f, w, &v[i], hist_find(w, v[i].name), now);
	if (n == 0)
		put_line(f, w, "(no limiters defined)");
	else if (shown < n)
		fprintf(f, "... %zu more (a taller terminal shows them)%s\n",
		    n - shown, w->tty_out ? "\033[K" : "");
	hot_panel(f, w, &hp);
	fputs(w->tty_out ? "\033[J" : "\n", f);
	fclose(f);
	if (buf != NULL)
		term_write(buf);
	free(buf);
	free(hp.v);
	free(v);
	return 0;
}

/* Wait for the next frame.  Returns 0 (time for a frame), 1 (quit), or
 * the number of a signal that asks to stop. */
static int
wait_frame(struct watch *w, const sigset_t *waitmask)
{
	uint64_t deadline = shmt__mono_ns() + w->delay_ns;

	for (;;) {
		struct pollfd pfd = { STDIN_FILENO, POLLIN, 0 };
		uint64_t now = shmt__mono_ns();
		struct timespec ts;
		char key;

		if (got_signal)
			return got_signal;
		if (got_winch) {
			got_winch = 0;
			term_size(w);
			term_write("\033[2J");
			return 0;
		}
		if (now >= deadline)
			return 0;
		ts.tv_sec = (time_t)((deadline - now) / 1000000000ULL);
		ts.tv_nsec = (long)((deadline - now) % 1000000000ULL);
		if (!w->tty_in)
			pfd.fd = -1;
		if (ppoll(&pfd, 1, &ts, waitmask) <= 0 ||
		    !(pfd.revents & (POLLIN | POLLHUP)))
			continue;
		if (read(STDIN_FILENO, &key, 1) != 1)
			w->tty_in = 0;   /* end of input: keep showing */
		else if (key == 'q' || key == 'Q')
			return 1;
		else if (key == 'r' || key == 12 /* Ctrl-L */)
			term_write(w->tty_out ? "\033[2J" : "");
	}
}

static int
watch_loop(struct watch *w)
{
	sigset_t waitmask;
	long n = 0;
	int rc;

	signals_setup(&waitmask);
	if ((rc = term_setup(w)) != 0) {
		term_restore();
		shmtc_err("cannot set up the terminal: %s", strerror(-rc));
		return SHMTC_MISSING;
	}
	for (;;) {
		if ((rc = frame(w)) != 0) {
			term_restore();
			shmtc_err("%s: %s", shmt_name(w->h), shmt_strerror(rc));
			return shmtc_exit_for(rc);
		}
		if (w->frames > 0 && ++n >= w->frames)
			break;
		rc = wait_frame(w, &waitmask);
		if (rc == 1)
			break;
		if (rc > 1) {
			term_restore();
			return -rc;
		}
	}
	term_restore();
	return SHMTC_OK;
}

static int
parse_delay(const char *s, uint64_t *ns)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(v >= 0.05) ||
	    v > 3600)
		return -EINVAL;
	*ns = (uint64_t)(v * 1e9);
	return 0;
}

static int
watch_parse(struct shmtc *c, int argc, char **argv, struct watch *w)
{
	static const struct option longopts[] = {
		{ "delay", required_argument, NULL, 'd' },
		{ "frames", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 }
	};
	char *arg, *end;
	int opt;

	w->delay_ns = 1000000000ULL;
	while ((opt = shmtc_getopt(c, argc, argv, "d:n:", longopts, &arg)) >= 0) {
		if (opt == 'd' && parse_delay(arg, &w->delay_ns) != 0)
			return shmtc_usage_error(c, "bad delay '%s' (seconds, "
			    "0.05 to 3600)", arg);
		if (opt == 'n') {
			errno = 0;
			w->frames = strtol(arg, &end, 10);
			if (errno != 0 || *end != '\0' || end == arg ||
			    w->frames < 1)
				return shmtc_usage_error(c, "bad frame count "
				    "'%s'", arg);
		}
	}
	if (opt == -2)
		return -1;      /* help printed: exit 0 without running */
	if (opt != -1)
		return shmtc_getopt_exit(opt);
	return shmtc_operands(c, argc, argv, 0, 0);
}

int
shmtc_cmd_watch(struct shmtc *c, int argc, char **argv)
{
	struct watch w = { 0 };
	int rc;

	if ((rc = watch_parse(c, argc, argv, &w)) != 0)
		return rc < 0 ? SHMTC_OK : rc;
	if ((rc = shmtc_open(c, &w.h)) != 0)
		return rc;
	setlocale(LC_CTYPE, "");
	w.utf8 = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
	w.tty_out = isatty(STDOUT_FILENO);
	w.tty_in = w.tty_out && isatty(STDIN_FILENO);
	term_size(&w);
	rc = watch_loop(&w);
	shmt_close(w.h);
	for (size_t i = 0; i < w.nhist; i++)
		free(w.hist[i]);
	free(w.hist);
	if (rc < 0) {
		/* Die of the signal that stopped us, now that the terminal
		 * and the process slot are given back. */
		sigset_t set;

		signal(-rc, SIG_DFL);
		sigemptyset(&set);
		sigaddset(&set, -rc);
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		raise(-rc);
		rc = 128 - rc;
	}
	return rc;
}
