/* SPDX-License-Identifier: MIT */
/*
 * LMDB as a peer for the dictionary's workloads: the multi-process
 * key-value store in a memory map that users know.  The bench stores every
 * key in a fresh environment in a temporary directory on tmpfs (/dev/shm
 * when it is writable, else $TMPDIR, else /tmp), removed after the run;
 * MDB_NOSYNC, since nothing here is meant to outlive the machine (as
 * nothing in a shared-memory segment does), and MDB_NOTLS, so a worker's
 * read transaction and its writes are its own and not its thread's.
 *
 * A get renews the worker's read transaction (mdb_txn_renew), looks the
 * key up, copies the value out and resets the transaction
 * (mdb_txn_reset): the documented way to read repeatedly without
 * allocating a transaction per read and without holding a snapshot that
 * stops writers from reusing pages.  A set is a write transaction of its
 * own (begin, put, commit); LMDB serialises writers on one lock.
 *
 * Each worker process opens the environment itself, after the fork, as
 * LMDB requires; the bench process closes its own before any worker runs.
 */
#include "bench.h"
#include "zipf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SHMT_BENCH_HAVE_LMDB

#include <dirent.h>
#include <lmdb.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

struct lm_global {
	char dir[256];
	size_t mapsize;
	unsigned readers;
};

struct lm_proc {
	MDB_env *env;
	MDB_dbi dbi;
	const struct bench_conf *c;
};

struct lm_worker {
	struct lm_proc *p;
	MDB_txn *rtxn;        /* reset between gets */
	uint64_t rnd;         /* dict-mixed: picks get or set */
	char *value;          /* read into, written from */
};

/* Sets are stored first in write transactions of this many puts. */
#define LM_PRELOAD_BATCH 65536
#define LM_FLAGS (MDB_NOSYNC | MDB_NOTLS)

/* LMDB's errors as -errno: its own codes (negative) are -EIO. */
static int
lm_err(int rc)
{
	return rc == 0 ? 0 : rc > 0 ? -rc : -EIO;
}

static int
lm_supports(const struct bench_conf *c)
{
	return bench_kind_dict(c->kind);
}

/* Where the environment goes: tmpfs if there is one to write to. */
static const char *
lm_base(void)
{
	const char *t = getenv("TMPDIR");

	if (access("/dev/shm", W_OK | X_OK) == 0)
		return "/dev/shm";
	return t != NULL && *t != '\0' ? t : "/tmp";
}

static void
lm_rmdir(const char *dir)
{
	char path[320];

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/lock.mdb", dir);
	unlink(path);
	rmdir(dir);
}

static void
lm_clean_in(const char *base)
{
	DIR *d = opendir(base);
	struct dirent *e;

	while (d != NULL && (e = readdir(d)) != NULL) {
		char dir[300];
		long pid;

		if (strncmp(e->d_name, "shmtb-lmdb-", 11) != 0)
			continue;
		pid = strtol(e->d_name + 11, NULL, 10);
		if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(dir, sizeof(dir), "%s/%s", base, e->d_name);
		lm_rmdir(dir);
	}
	if (d != NULL)
		closedir(d);
}

void
bench_lmdb_clean_stale(void)
{
	lm_clean_in(lm_base());
}

static int
lm_open(const struct lm_global *g, MDB_env **out)
{
	MDB_env *env;
	int rc;

	if ((rc = mdb_env_create(&env)) != 0)
		return lm_err(rc);
	if ((rc = mdb_env_set_mapsize(env, g->mapsize)) == 0 &&
	    (rc = mdb_env_set_maxreaders(env, g->readers)) == 0 &&
	    (rc = mdb_env_open(env, g->dir, LM_FLAGS, 0600)) == 0) {
		*out = env;
		return 0;
	}
	mdb_env_close(env);
	return lm_err(rc);
}

/* The main database's handle, valid for the environment's life. */
static int
lm_dbi(MDB_env *env, unsigned flags, MDB_dbi *dbi)
{
	MDB_txn *txn;
	int rc;

	if ((rc = mdb_txn_begin(env, NULL, flags, &txn)) != 0)
		return lm_err(rc);
	if ((rc = mdb_dbi_open(txn, NULL, 0, dbi)) != 0) {
		mdb_txn_abort(txn);
		return lm_err(rc);
	}
	return lm_err(mdb_txn_commit(txn));
}

static int
lm_preload(MDB_env *env, MDB_dbi dbi, const struct bench_conf *c)
{
	char *v = malloc((size_t)c->value_size + 1), key[16];
	MDB_txn *txn = NULL;
	int rc = 0;

	if (v == NULL)
		return -ENOMEM;
	memset(v, 'v', c->value_size);
	for (uint32_t i = 0; i < c->dict_keys && rc == 0; i++) {
		MDB_val k = { bench_key(key, i), key };
		MDB_val d = { c->value_size, v };

		if (txn == NULL && (rc = mdb_txn_begin(env, NULL, 0, &txn)) != 0)
			break;
		if ((rc = mdb_put(txn, dbi, &k, &d, 0)) != 0)
			break;
		if ((i + 1) % LM_PRELOAD_BATCH == 0 || i + 1 == c->dict_keys) {
			rc = mdb_txn_commit(txn);
			txn = NULL;
		}
	}
	if (txn != NULL)
		mdb_txn_abort(txn);
	free(v);
	return lm_err(rc);
}

static int
lm_setup(const struct bench_conf *c, void **gp)
{
	struct lm_global *g = calloc(1, sizeof(*g));
	MDB_env *env;
	MDB_dbi dbi;
	int rc;

	if (g == NULL)
		return -ENOMEM;
	*gp = g;
	/* Room for every key twice over (copy-on-write pages while sets run)
	 * and their pages' overhead; on tmpfs only what is written is used. */
	g->mapsize = (size_t)c->dict_keys * ((size_t)c->value_size + 128) * 4 +
	    ((size_t)64 << 20);
	g->readers = (unsigned)c->workers + 16;
	snprintf(g->dir, sizeof(g->dir), "%s/shmtb-lmdb-%d-XXXXXX", lm_base(),
	    (int)getpid());
	if (mkdtemp(g->dir) == NULL) {
		rc = -errno;
		g->dir[0] = '\0';
		return rc;
	}
	if ((rc = lm_open(g, &env)) < 0)
		return rc;
	if ((rc = lm_dbi(env, 0, &dbi)) == 0)
		rc = lm_preload(env, dbi, c);
	mdb_env_close(env);
	return rc;
}

static int
lm_attach(void *gp, const struct bench_conf *c, void **pctx)
{
	struct lm_proc *p = calloc(1, sizeof(*p));
	int rc;

	if (p == NULL)
		return -ENOMEM;
	p->c = c;
	if ((rc = lm_open(gp, &p->env)) < 0) {
		free(p);
		return rc;
	}
	if ((rc = lm_dbi(p->env, MDB_RDONLY, &p->dbi)) < 0) {
		mdb_env_close(p->env);
		free(p);
		return rc;
	}
	*pctx = p;
	return 0;
}

static int
lm_get(struct lm_worker *w, uint64_t arg)
{
	char key[16];
	MDB_val k = { bench_key(key, arg), key }, d;
	int rc;

	if ((rc = mdb_txn_renew(w->rtxn)) != 0)
		return lm_err(rc);
	rc = mdb_get(w->rtxn, w->p->dbi, &k, &d);
	if (rc == 0)
		memcpy(w->value, d.mv_data, d.mv_size <= w->p->c->value_size ?
		    d.mv_size : w->p->c->value_size);
	mdb_txn_reset(w->rtxn);
	return rc == 0 ? 1 : rc == MDB_NOTFOUND ? 0 : lm_err(rc);
}

static int
lm_set(struct lm_worker *w, uint64_t arg)
{
	char key[16];
	MDB_val k = { bench_key(key, arg), key };
	MDB_val d = { w->p->c->value_size, w->value };
	MDB_txn *txn;
	int rc;

	if ((rc = mdb_txn_begin(w->p->env, NULL, 0, &txn)) != 0)
		return lm_err(rc);
	if ((rc = mdb_put(txn, w->p->dbi, &k, &d, 0)) != 0) {
		mdb_txn_abort(txn);
		return lm_err(rc);
	}
	return (rc = mdb_txn_commit(txn)) == 0 ? 1 : lm_err(rc);
}

static int
lm_op_get(void *wctx, uint64_t arg)
{
	return lm_get(wctx, arg);
}

static int
lm_op_set(void *wctx, uint64_t arg)
{
	return lm_set(wctx, arg);
}

/* One op in ten is a set. */
static int
lm_op_mixed(void *wctx, uint64_t arg)
{
	struct lm_worker *w = wctx;

	return bench_rand(&w->rnd) % 10 == 0 ? lm_set(w, arg) : lm_get(w, arg);
}

static int
lm_attach_thread(void *pctx, int worker, void **wctx, bench_op_fn *op)
{
	struct lm_proc *p = pctx;
	struct lm_worker *w = calloc(1, sizeof(*w));
	int rc;

	if (w == NULL)
		return -ENOMEM;
	w->p = p;
	w->rnd = p->c->seed ^ ((uint64_t)(worker + 1) << 32) ^ 1;
	if ((w->value = malloc((size_t)p->c->value_size + 1)) == NULL) {
		free(w);
		return -ENOMEM;
	}
	memset(w->value, 's', p->c->value_size);
	if ((rc = mdb_txn_begin(p->env, NULL, MDB_RDONLY, &w->rtxn)) != 0) {
		free(w->value);
		free(w);
		return lm_err(rc);
	}
	mdb_txn_reset(w->rtxn);
	*op = p->c->kind == BK_DICT_SET ? lm_op_set :
	    p->c->kind == BK_DICT_MIXED ? lm_op_mixed : lm_op_get;
	*wctx = w;
	return 0;
}

static void
lm_detach_thread(void *wctx)
{
	struct lm_worker *w = wctx;

	mdb_txn_abort(w->rtxn);
	free(w->value);
	free(w);
}

static void
lm_detach(void *pctx)
{
	struct lm_proc *p = pctx;

	mdb_env_close(p->env);
	free(p);
}

static void
lm_teardown(void *gp)
{
	struct lm_global *g = gp;

	if (g == NULL)
		return;
	if (g->dir[0] != '\0')
		lm_rmdir(g->dir);
	free(g);
}

const struct bench_sys bench_sys_lmdb = {
	.name = "lmdb",
	.supports = lm_supports,
	.setup = lm_setup,
	.attach = lm_attach,
	.attach_thread = lm_attach_thread,
	.detach_thread = lm_detach_thread,
	.detach = lm_detach,
	.teardown = lm_teardown,
};

#else /* !SHMT_BENCH_HAVE_LMDB: built without liblmdb, the column is empty */

static int
lm_supports(const struct bench_conf *c)
{
	return 0;
}

void
bench_lmdb_clean_stale(void)
{
}

const struct bench_sys bench_sys_lmdb = {
	.name = "lmdb",
	.supports = lm_supports,
};

#endif
