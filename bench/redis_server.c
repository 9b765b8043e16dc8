/* SPDX-License-Identifier: MIT */
/*
 * A private redis-server for the bench: unix socket only (port 0), no RDB,
 * no AOF, in a fresh temporary directory.  The child asks the kernel to
 * kill it when the bench dies (PR_SET_PDEATHSIG), so even a bench killed
 * with SIGKILL leaves no server behind; a normal exit stops it with SIGTERM.
 * The server is pinned to one CPU (--redis-cpu; sched_setaffinity before
 * the exec, which keeps it) so that its figures do not depend on where the
 * scheduler puts it next to its clients: between the same CPU and another
 * a get costs ten times more or less on some machines.
 */
#include "redis.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t redis_pid;
static char redis_dir[64];
static char redis_sock[REDIS_SOCK_MAX];

static void
redis_exec(pid_t parent, int cpu)
{
	char log[96];

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	if (cpu >= 0) {
		cpu_set_t one;

		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		if (sched_setaffinity(0, sizeof(one), &one) < 0) {
			fprintf(stderr, "shmthrottle-bench: redis-server: "
			    "cannot pin to CPU %d: %s\n", cpu, strerror(errno));
			_exit(126);
		}
	}
	snprintf(log, sizeof(log), "%s/redis.log", redis_dir);
	execlp("redis-server", "redis-server", "--port", "0",
	    "--unixsocket", redis_sock, "--unixsocketperm", "700",
	    "--save", "", "--appendonly", "no", "--dir", redis_dir,
	    "--logfile", log, "--daemonize", "no", (char *)NULL);
	_exit(127);
}

/* Wait until the server answers PING, for at most 5 s. */
static int
redis_wait_ready(void)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	for (int i = 0; i < 500; i++) {
		redisContext *ctx = redisConnectUnix(redis_sock);
		redisReply *r = NULL;
		int status;

		if (ctx != NULL && !ctx->err)
			r = redisCommand(ctx, "PING");
		redisFree(ctx);
		if (r != NULL) {
			freeReplyObject(r);
			return 0;
		}
		if (waitpid(redis_pid, &status, WNOHANG) == redis_pid) {
			redis_pid = 0;
			return -ECHILD;
		}
		nanosleep(&ts, NULL);
	}
	return -ETIMEDOUT;
}

static int
redis_start(int cpu)
{
	pid_t parent = getpid();
	int rc;

	snprintf(redis_dir, sizeof(redis_dir), "/tmp/shmtb-redis-%d-XXXXXX",
	    (int)parent);
	if (mkdtemp(redis_dir) == NULL)
		return -errno;
	snprintf(redis_sock, sizeof(redis_sock), "%s/redis.sock", redis_dir);
	redis_pid = fork();
	if (redis_pid < 0) {
		rc = -errno;
		redis_pid = 0;
		bench_redis_stop(0);
		return rc;
	}
	if (redis_pid == 0)
		redis_exec(parent, cpu);
	if ((rc = redis_wait_ready()) < 0) {
		fprintf(stderr, "shmthrottle-bench: redis-server did not start "
		    "(see %s/redis.log): %s\n", redis_dir, strerror(-rc));
		bench_redis_stop(0);
		return rc;
	}
	atexit(bench_redis_end);
	return 0;
}

/* Remove DIR's log and socket, then DIR. */
static void
redis_rmdir(const char *dir)
{
	char path[320];

	snprintf(path, sizeof(path), "%s/redis.log", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/redis.sock", dir);
	unlink(path);
	rmdir(dir);
}

void
bench_redis_clean_stale(void)
{
	DIR *d = opendir("/tmp");
	struct dirent *e;

	while (d != NULL && (e = readdir(d)) != NULL) {
		char dir[300];
		long pid;

		if (strncmp(e->d_name, "shmtb-redis-", 12) != 0)
			continue;
		pid = strtol(e->d_name + 12, NULL, 10);
		if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(dir, sizeof(dir), "/tmp/%s", e->d_name);
		redis_rmdir(dir);
	}
	if (d != NULL)
		closedir(d);
}

int
bench_redis_socket(const struct bench_conf *c, char *buf, size_t cap)
{
	int rc;

	if (c->redis_sock != NULL) {
		snprintf(buf, cap, "%s", c->redis_sock);
		return 0;
	}
	if (redis_pid == 0 && (rc = redis_start(c->redis_cpu)) < 0)
		return rc;
	snprintf(buf, cap, "%s", redis_sock);
	return 0;
}

void
bench_redis_end(void)
{
	bench_redis_stop(0);
}

void
bench_redis_stop(int async)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	if (redis_pid > 0) {
		kill(redis_pid, SIGTERM);
		for (int i = 0; i < 300 && waitpid(redis_pid, NULL, WNOHANG) == 0;
		    i++)
			nanosleep(&ts, NULL);
		kill(redis_pid, SIGKILL);
		waitpid(redis_pid, NULL, 0);
		redis_pid = 0;
	}
	if (async || redis_dir[0] == '\0')
		return;
	redis_rmdir(redis_dir);
	redis_dir[0] = '\0';
}

/*
 * The first CPU this process may run on: the default home of the bench's
 * redis-server, beside worker 0 (pinned there too).  One CPU for the
 * server and its first client makes a round trip two context switches on
 * one CPU; a server on another CPU adds the wake-up of that CPU, which on
 * a VM with idle vCPUs costs tens of microseconds and on a shared machine
 * depends on what else runs there (--redis-cpu measures any placement).
 */
int
bench_first_cpu(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return -1;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, &set))
			return cpu;
	return -1;
}
