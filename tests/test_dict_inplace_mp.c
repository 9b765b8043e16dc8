/* SPDX-License-Identifier: MIT */
/*
 * Overwrites in place racing lock-free readers, in real forked processes:
 * writers keep setting a few keys to self-checking values that always fit
 * their item's place (so every set after the first is an overwrite in
 * place), while readers get them and check that each value is whole: its
 * length follows from its first byte and every byte equals the first.  A
 * reader that kept a copy mixing two values would fail the check.  Run
 * twice: with values that fit the keys' slots (each key in its bucket's
 * slot, store.c "Slots") and with values that take a 128-byte heap block.
 * Seeded (SHMT_SEED replays a run); the number of sets is fixed, not a
 * time.
 */
#include "testutil.h"

#include "dict.h"
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define IR_KEYS 6
#define IR_WRITERS 2
#define IR_READERS 2
#define IR_SETS 300000.0        /* per writer, scaled by tu_scale() */
#define IR_ALARM 240            /* turns a hang into a loud failure */

struct ir_shared {
	atomic_int writers_left;
	_Atomic uint64_t reads, checked, again, torn;
	char first_torn[160];
	atomic_int torn_claimed;
};

static void
ir_key(char *key, unsigned i)
{
	snprintf(key, 8, "ir:%u", i);
}

/* 1: the values fit the keys' slots; 0: each takes a heap block. */
static int ir_slot;

/* A value of C, each byte C: in slot mode 4 + C % 24 bytes (key "ir:N" +
 * 27 <= 32: every value fits the slot), else 29 + C % 60 bytes (32 + 4 +
 * 29 > 64, 32 + 4 + 88 <= 128: every value takes the same 128-byte
 * block). */
static size_t
ir_value(unsigned char c, unsigned char *buf)
{
	size_t n = ir_slot ? 4 + c % 24u : 29 + c % 60u;

	memset(buf, c, n);
	return n;
}

static void
ir_writer(const char *seg, uint64_t seed, uint64_t sets, struct ir_shared *s)
{
	unsigned char val[96];
	uint64_t rng = seed;
	shmt_t *h = NULL;
	char key[8];

	alarm(IR_ALARM);
	if (shmt_open(seg, &h) != 0)
		_exit(10);
	for (uint64_t i = 0; i < sets; i++) {
		uint64_t r = tu_rand(&rng);
		size_t n = ir_value((unsigned char)(r >> 8), val);

		ir_key(key, (unsigned)(r % IR_KEYS));
		if (shmt_set(h, key, strlen(key), val, n, 0) != 0)
			_exit(11);
	}
	shmt_close(h);
	atomic_fetch_sub(&s->writers_left, 1);
	_exit(0);
}

static void
ir_reader(const char *seg, uint64_t seed, struct ir_shared *s)
{
	unsigned char buf[128];
	uint64_t rng = seed;
	shmt_t *h = NULL;
	char key[8];

	alarm(IR_ALARM);
	if (shmt_open(seg, &h) != 0)
		_exit(20);
	while (atomic_load(&s->writers_left) > 0) {
		size_t n = 0;
		int rc;

		ir_key(key, (unsigned)(tu_rand(&rng) % IR_KEYS));
		rc = shmt_get(h, key, strlen(key), buf, sizeof(buf), &n);
		atomic_fetch_add(&s->reads, 1);
		if (rc == -EAGAIN) {
			atomic_fetch_add(&s->again, 1);
			continue;
		}
		if (rc != 0 || n == 0)
			_exit(21);
		atomic_fetch_add(&s->checked, 1);
		if (n != (ir_slot ? 4 + buf[0] % 24u : 29 + buf[0] % 60u) ||
		    memcmp(buf, buf + 1, n - 1) != 0) {
			atomic_fetch_add(&s->torn, 1);
			if (atomic_exchange(&s->torn_claimed, 1) == 0)
				snprintf(s->first_torn, sizeof(s->first_torn),
				    "%s: %zu bytes, first 0x%02x, last 0x%02x",
				    key, n, buf[0], n > 0 ? buf[n - 1] : 0);
		}
	}
	shmt_close(h);
	_exit(0);
}

static void
ir_wait_ok(pid_t pid)
{
	int status;

	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("child %d: %s %d", (int)pid, WIFEXITED(status) ?
		    "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) :
		    WTERMSIG(status));
}

/* Where KEY's item is now: the link that names it, or in slot mode 1
 * (the key is in its slot; it is never in a chain then). */
static uint64_t
ir_link(shmt_t *h, const char *key)
{
	const struct shmt_store *st = h->dict;
	uint64_t hash = key_hash(h, key, strlen(key)), *link;
	struct shmt_shard *sh = shard_at(st, shard_of(st, hash));
	struct shmt_item *it;
	struct slot_copy c;

	it = shmt__store_find(st, sh, hash, key, strlen(key), &link);
	slot_load(bucket_at(st, sh, bucket_of(st, hash)), &c);
	if (ir_slot) {
		assert_null(it);
		assert_true(slot_holds(&c, hash_tag(hash), key, strlen(key)));
		return 1;
	}
	assert_non_null(it);
	assert_false(slot_holds(&c, hash_tag(hash), key, strlen(key)));
	return *link;
}

static void
inplace_race(const char *name)
{
	uint64_t seed = tu_seed(name), links[IR_KEYS];
	uint64_t sets = (uint64_t)(IR_SETS * tu_scale());
	pid_t writers[IR_WRITERS], readers[IR_READERS];
	unsigned char val[96];
	shmt_dict_stat_t ds;
	struct ir_shared *s;
	shmt_config_t cfg;
	shmt_t *h = NULL;
	char seg[128], key[8];

	if (sets < 20000)
		sets = 20000;
	s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(s != MAP_FAILED);
	memset(s, 0, sizeof(*s));
	atomic_store(&s->writers_left, IR_WRITERS);
	tu_config_small(&cfg);
	tu_segname(seg, sizeof(seg), "inplace-mp");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	for (unsigned i = 0; i < IR_KEYS; i++) {
		ir_key(key, i);
		assert_int_equal(shmt_set(h, key, strlen(key), val,
		    ir_value((unsigned char)i, val), 0), 0);
		links[i] = ir_link(h, key);
	}
	fflush(stdout);
	for (int i = 0; i < IR_READERS; i++) {
		readers[i] = fork();
		assert_true(readers[i] >= 0);
		if (readers[i] == 0)
			ir_reader(seg, seed ^ (0x100 + (uint64_t)i), s);
	}
	for (int i = 0; i < IR_WRITERS; i++) {
		writers[i] = fork();
		assert_true(writers[i] >= 0);
		if (writers[i] == 0)
			ir_writer(seg, seed + (uint64_t)i, sets, s);
	}
	for (int i = 0; i < IR_WRITERS; i++)
		ir_wait_ok(writers[i]);
	for (int i = 0; i < IR_READERS; i++)
		ir_wait_ok(readers[i]);
	printf("# inplace race: %d writers x %" PRIu64 " sets, %" PRIu64
	    " reads, %" PRIu64 " values checked, %" PRIu64 " -EAGAIN, %"
	    PRIu64 " torn\n", IR_WRITERS, sets, atomic_load(&s->reads),
	    atomic_load(&s->checked), atomic_load(&s->again),
	    atomic_load(&s->torn));
	if (atomic_load(&s->torn) != 0)
		fail_msg("%" PRIu64 " torn reads; the first: %s",
		    atomic_load(&s->torn), s->first_torn);
	assert_true(atomic_load(&s->checked) > 0);
	/* Every set was an overwrite: each key's item never moved. */
	for (unsigned i = 0; i < IR_KEYS; i++) {
		ir_key(key, i);
		assert_int_equal(ir_link(h, key), links[i]);
	}
	assert_int_equal(shmt_dict_stat(h, &ds), 0);
	assert_int_equal(ds.items, IR_KEYS);
	assert_int_equal(ds.repairs, 0);
	munmap(s, sizeof(*s));
	tu_close_unlink(h, seg);
}

static void
test_inplace_race(void **state)
{
	(void)state;
	ir_slot = 0;
	inplace_race("inplace_race");
}

static void
test_inplace_race_slot(void **state)
{
	(void)state;
	ir_slot = 1;
	inplace_race("inplace_race_slot");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_inplace_race, tu_sweep),
		cmocka_unit_test_teardown(test_inplace_race_slot, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
