/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-rcucost: what a read-side critical section of liburcu costs
 * per call when the library (a shared object) takes one around each call
 * on its segment, for each flavour that needs no help from the caller:
 * urcu-memb (registered lazily), urcu-bp, urcu-qsbr (each call a
 * quiescent state), each built with the default TLS dialect of x86-64
 * (general dynamic: a call of __tls_get_addr per access) and with
 * -mtls-dialect=gnu2 (TLS descriptors), and each loaded two ways: at
 * start (LD_PRELOAD: its TLS and liburcu's sit in the static TLS block, as
 * for a program linked with -lshmthrottle) and by dlopen (as the Python
 * binding is loaded).  The objects are bench/rcucost_lib.c.
 *
 * Every variant runs in a process of its own (this program again), in
 * thread CPU time: the best and the median of 7 rounds of N calls, and
 * the read side alone (the variant less the call with none, same load,
 * same dialect), one line each:
 *
 *   rcucost flavour=memb tls=gnu2 load=dlopen ns_per_call=2.31
 *     median_ns=2.40 read_side_ns=1.02
 *
 *   shmthrottle-rcucost [N]           every variant (N default 50000000)
 *   shmthrottle-rcucost -1 OBJECT [N] one object, in this process
 *
 * Instructions do not wander with the load, e.g.
 *   valgrind --tool=callgrind --toggle-collect=rcucost_loop \
 *     shmthrottle-rcucost -1 build/bench/rcucost-memb-gnu2.so 100000
 * and again with 200000: the difference / 100000 is one call's.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "probe.h"

#ifndef RCUCOST_DIR
#error "RCUCOST_DIR: where the objects are built"
#endif

#define ROUNDS 7

/* Load OBJECT, time its loop: "best median" in ns per call on stdout. */
static int
run_one(const char *obj, uint64_t n)
{
	uint64_t (*loop)(uint64_t);
	double r[ROUNDS];
	void *dl;

	if ((dl = dlopen(obj, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		fprintf(stderr, "rcucost: %s\n", dlerror());
		return 1;
	}
	*(void **)&loop = dlsym(dl, "rcucost_loop");
	if (loop == NULL) {
		fprintf(stderr, "rcucost: %s: no rcucost_loop\n", obj);
		return 1;
	}
	if (loop(n / 10) != n / 10) {       /* warm-up, and a check */
		fprintf(stderr, "rcucost: %s: wrong sum\n", obj);
		return 1;
	}
	for (int i = 0; i < ROUNDS; i++) {
		double t0 = probe_cpu_ns();

		if (loop(n) != n)
			return 1;
		r[i] = (probe_cpu_ns() - t0) / (double)n;
	}
	qsort(r, ROUNDS, sizeof(r[0]), probe_cmp_d);
	printf("%.3f %.3f\n", r[0], r[ROUNDS / 2]);
	return 0;
}

/* Run OBJECT in a child (preloaded when PRELOAD): 0 and its figures. */
static int
child(const char *self, const char *obj, int preload, uint64_t n,
    double *best, double *median)
{
	char nbuf[32], out[128];
	int fd[2], st;
	ssize_t len;
	pid_t pid;

	snprintf(nbuf, sizeof(nbuf), "%llu", (unsigned long long)n);
	if (pipe(fd) != 0 || (pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		if (preload)
			setenv("LD_PRELOAD", obj, 1);
		else
			unsetenv("LD_PRELOAD");
		execl(self, self, "-1", obj, nbuf, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	len = read(fd[0], out, sizeof(out) - 1);
	close(fd[0]);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0 || len <= 0)
		return -1;
	out[len] = '\0';
	return sscanf(out, "%lf %lf", best, median) == 2 ? 0 : -1;
}

int
main(int argc, char **argv)
{
	static const char *flavours[] = { "none", "memb", "memb-flag", "bp",
	    "qsbr", "memb-one", "qsbr-one" };
	static const char *dialects[] = { "gd", "gnu2", "ie" };
	static const char *loads[] = { "start", "dlopen" };
	char self[4096];
	uint64_t n = 50000000;
	ssize_t sl;

	if (argc >= 3 && strcmp(argv[1], "-1") == 0)
		return run_one(argv[2], argc > 3 ? strtoull(argv[3], NULL, 10) :
		    n);
	if (argc > 1 && (n = strtoull(argv[1], NULL, 10)) == 0) {
		fprintf(stderr, "usage: shmthrottle-rcucost [N] | -1 OBJECT "
		    "[N]\n");
		return 2;
	}
	if ((sl = readlink("/proc/self/exe", self, sizeof(self) - 1)) <= 0)
		return 1;
	self[sl] = '\0';
	for (int l = 0; l < 2; l++)
		for (int d = 0; d < 3; d++) {
			double base = 0, bm = 0;

			for (int f = 0; f < 7; f++) {
				char obj[4096];
				double best, median;

				snprintf(obj, sizeof(obj), "%s/rcucost-%s-%s.so",
				    RCUCOST_DIR, flavours[f], dialects[d]);
				if (child(self, obj, l == 0, n, &best,
				    &median) != 0) {
					printf("rcucost flavour=%s tls=%s load=%s "
					    "failed\n", flavours[f], dialects[d],
					    loads[l]);
					continue;
				}
				if (f == 0) {
					base = best;
					bm = median;
				}
				printf("rcucost flavour=%s tls=%s load=%s "
				    "ns_per_call=%.2f median_ns=%.2f "
				    "read_side_ns=%.2f median_read_side_ns=%.2f\n",
				    flavours[f], dialects[d], loads[l], best,
				    median, best - base, median - bm);
				fflush(stdout);
			}
		}
	return 0;
}
