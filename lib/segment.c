/* SPDX-License-Identifier: MIT */
/*
 * The segment: creating, validating, attaching and describing the named
 * shared-memory object that holds every shared structure.
 *
 * Creation builds the object under a private temporary name and publishes
 * it with link(2) in /dev/shm, which fails with EEXIST when the name exists:
 * so a segment is never seen half-built, and two concurrent creators end
 * with one segment, one winner (0) and one loser (-EEXIST).  The alternative,
 * O_CREAT|O_EXCL on the final name, publishes an empty object that openers
 * must then wait on, and leaves it behind for good if the creator dies.
 */
#include "segment.h"

#include "analyzer.h"
#include "dict.h"
#include "limiter.h"
#include "fork.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* glibc maps shm_open names to this directory. */
#define SHMT_SHM_DIR "/dev/shm"

SHMT_EXPORT void
shmt_config_init(shmt_config_t *cfg)
{
	if (cfg == NULL)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->mode = 0600;
	cfg->gid = (gid_t)-1;
	cfg->max_limiters = 64;
	cfg->max_slots = 256;
	cfg->arena_bytes = 16ULL << 20;
	cfg->dict_bytes = 32ULL << 20;
	cfg->dict_shards = 8;
	cfg->dict_eviction = 1;
	cfg->counters_bytes = 8ULL << 20;
	cfg->counters_shards = 4;
	cfg->counters_subwindows = 24;
	cfg->counters_window_ns = 24ULL * 3600 * 1000000000ULL;
	cfg->analyzer_bytes = 1ULL << 20;
	cfg->analyzer_window_ns = 60ULL * 1000000000ULL;
	cfg->analyzer_subwindows = 12;
	cfg->analyzer_threshold_ppm = 100000;
	cfg->analyzer_clients = 0;
	cfg->dict_max_key = SHMT_KEY_MAX;
	cfg->dict_max_value = SHMT_VALUE_MAX;
	cfg->dict_default_ttl_ms = 0;
}

int
shmt__name_check(const char *name)
{
	size_t len;

	if (name == NULL || name[0] != '/')
		return -EINVAL;
	len = strnlen(name, SHMT_SEGNAME_MAX + 1);
	if (len > SHMT_SEGNAME_MAX)
		return -ENAMETOOLONG;
	if (len < 2 || strchr(name + 1, '/') != NULL)
		return -EINVAL;
	if (strcmp(name, "/.") == 0 || strcmp(name, "/..") == 0)
		return -EINVAL;
	return 0;
}

static uint64_t
fnv1a(uint64_t h, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		h ^= (v >> (i * 8)) & 0xff;
		h *= 0x100000001b3ULL;
	}
	return h;
}

/*
 * The format word: ABI version in the top 16 bits, and a hash of the size,
 * alignment and key offsets of every shared type in the rest.  Any change of
 * layout, compiler padding or libc mutex size gives another word, so a
 * mismatched reader is refused (SHMT_EFORMAT) instead of guessing.
 */
uint64_t
shmt__format_word(void)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	const uint64_t facts[] = {
		sizeof(struct shmt_hdr), alignof(struct shmt_hdr),
		sizeof(struct shmt_params),
		offsetof(struct shmt_hdr, sh_daemon_pid),
		offsetof(struct shmt_hdr, sh_table_lock),
		offsetof(struct shmt_hdr, sh_secret), SHMT_SECRET_BYTES,
		sizeof(struct shmt_lock),
		sizeof(struct shmt_slot), alignof(struct shmt_slot),
		sizeof(struct shmt_lim), alignof(struct shmt_lim),
		offsetof(struct shmt_lim, lm_w),
		offsetof(struct shmt_lim, lm_released_uses),
		sizeof(struct shmt_client), alignof(struct shmt_client),
		sizeof(struct shmt_ring_slot), sizeof(struct shmt_log_slot),
		sizeof(struct shmt_w), SHMT_LINE, SHMT_LIMITER_NAME_MAX,
		sizeof(struct shmt_shard), offsetof(struct shmt_shard, ds_seq),
		sizeof(struct shmt_item), sizeof(struct shmt_fblock),
		sizeof(struct shmt_an_owner), sizeof(struct shmt_an_sum),
		SHMT_AN_TAG_SHIFT, SHMT_AN_PROBE_STEP, sizeof(struct shmt_an_name),
		SHMT_AN_STRIPES, SHMT_ORDER_MAX,
	};

	for (size_t i = 0; i < sizeof(facts) / sizeof(facts[0]); i++)
		h = fnv1a(h, facts[i]);
	return ((uint64_t)SHMT_ABI_VERSION << 48) | (h & 0xffffffffffffULL);
}

/* Start time of PID in clock ticks since boot (field 22 of /proc/PID/stat)
 * and its state letter (field 3).  Returns 0 for start when unknown.
 * Together with the pid the start time names one process: a reused pid has
 * another start time. */
int
shmt__proc_read(const char *path, char *buf, size_t cap)
{
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, cap - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

static uint64_t
proc_stat(pid_t pid, char *state)
{
	char path[64], buf[1024];
	const char *p;
	unsigned long long start = 0;
	int field;

	*state = '?';
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (shmt__proc_read(path, buf, sizeof(buf)) != 0)
		return 0;
	/* The command name may hold spaces and ')': skip to the last ')'. */
	p = strrchr(buf, ')');
	if (p == NULL || p[1] != ' ')
		return 0;
	*state = p[2];
	for (field = 2; *p != '\0' && field < 22; p++)
		if (*p == ' ')
			field++;
	if (sscanf(p, "%llu", &start) != 1)
		return 0;
	return start;
}

uint64_t
shmt__proc_start(pid_t pid)
{
	int saved = errno;
	char state;
	uint64_t start = proc_stat(pid, &state);

	errno = saved;
	return start;
}

/* 1 when PID runs and (if START is known) is the same process.  A zombie
 * (killed, not yet waited for) counts as dead: it holds nothing. */
int
shmt__pid_alive(pid_t pid, uint64_t start)
{
	int saved = errno;
	uint64_t now_start;
	char state;
	int alive;

	if (pid <= 0)
		return 0;
	alive = kill(pid, 0) == 0 || errno == EPERM;
	if (alive) {
		now_start = proc_stat(pid, &state);
		if (state == 'Z' || state == 'X')
			alive = 0;
		else if (start != 0 && now_start != 0 && now_start != start)
			alive = 0;
	}
	errno = saved;
	return alive;
}

static uint64_t
round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* The largest TTL any write accepts, in milliseconds (dict.c's bound). */
#define TTL_MS_MAX (UINT64_MAX / 2000000)

#define REFUSE(...) do { \
		if (why != NULL && why_len > 0) \
			snprintf(why, why_len, __VA_ARGS__); \
		return -EINVAL; \
	} while (0)

/* The trusted geometry of both stores, from the creation parameters:
 * 0, or -EINVAL with WHY (may be NULL) naming the parameter and the rule. */
static int
stores_geometry(const struct shmt_params *p, struct shmt_store *dict,
    struct shmt_store *ctr, uint64_t *dsize, uint64_t *csize, char *why,
    size_t why_len)
{
	const char *rule = NULL;
	int rc = shmt__store_geometry(p->sp_dict_bytes, p->sp_dict_shards, 0,
	    dict, dsize, &rule);

	if (rc != 0)
		REFUSE("dict_%s", rule);
	rc = shmt__store_geometry(p->sp_counters_bytes, p->sp_counters_shards,
	    1, ctr, csize, &rule);
	if (rc != 0)
		REFUSE("counters_%s", rule);
	if (p->sp_dict_max_key == 0 || p->sp_dict_max_key > SHMT_KEY_MAX)
		REFUSE("dict_max_key: must be from 1 to SHMT_KEY_MAX (%d) bytes",
		    SHMT_KEY_MAX);
	if (p->sp_dict_max_value > SHMT_VALUE_MAX)
		REFUSE("dict_max_value: at most SHMT_VALUE_MAX (%d) bytes",
		    SHMT_VALUE_MAX);
	if (p->sp_dict_default_ttl_ms > TTL_MS_MAX)
		REFUSE("dict_default_ttl_ms: at most %llu milliseconds",
		    (unsigned long long)TTL_MS_MAX);
	dict->eviction = p->sp_dict_eviction != 0;
	dict->max_key = p->sp_dict_max_key;
	dict->max_value = p->sp_dict_max_value;
	dict->default_ttl_ms = p->sp_dict_default_ttl_ms;
	ctr->eviction = 1;
	ctr->subw = p->sp_counters_subwindows;
	ctr->window = p->sp_counters_window_ns;
	ctr->max_key = SHMT_KEY_MAX;
	ctr->max_value = SHMT_VALUE_MAX;
	if (p->sp_counters_bytes != 0 &&
	    (ctr->subw == 0 || ctr->subw > 256))
		REFUSE("counters_subwindows: must be from 1 to 256");
	if (p->sp_counters_bytes != 0 && ctr->window / ctr->subw == 0)
		REFUSE("counters_window_ns: must be at least "
		    "counters_subwindows nanoseconds");
	return 0;
}

static void
params_from(const shmt_config_t *cfg, struct shmt_params *p)
{
	memset(p, 0, sizeof(*p));
	p->sp_max_limiters = cfg->max_limiters;
	p->sp_max_slots = cfg->max_slots;
	p->sp_arena_bytes = cfg->arena_bytes;
	p->sp_mode = (uint32_t)cfg->mode;
	p->sp_gid = (uint32_t)cfg->gid;
	p->sp_dict_bytes = cfg->dict_bytes;
	p->sp_dict_shards = cfg->dict_shards;
	p->sp_dict_eviction = cfg->dict_eviction;
	p->sp_counters_bytes = cfg->counters_bytes;
	p->sp_counters_shards = cfg->counters_shards;
	p->sp_counters_subwindows = cfg->counters_subwindows;
	p->sp_counters_window_ns = cfg->counters_window_ns;
	p->sp_analyzer_bytes = cfg->analyzer_bytes;
	p->sp_analyzer_window_ns = cfg->analyzer_window_ns;
	p->sp_analyzer_subwindows = cfg->analyzer_subwindows;
	p->sp_analyzer_threshold_ppm = cfg->analyzer_threshold_ppm;
	p->sp_analyzer_clients = cfg->analyzer_clients;
	/* 0 stands for the hard limit, so a config filled in by hand
	 * without shmt_config_init keeps the limits it always had. */
	p->sp_dict_max_key = cfg->dict_max_key != 0 ? cfg->dict_max_key :
	    SHMT_KEY_MAX;
	p->sp_dict_max_value = cfg->dict_max_value != 0 ?
	    cfg->dict_max_value : SHMT_VALUE_MAX;
	p->sp_dict_default_ttl_ms = cfg->dict_default_ttl_ms;
}

static int
an_geometry(const struct shmt_params *p, struct shmt_an *an, char *why,
    size_t why_len)
{
	const char *rule = NULL;
	int rc = shmt__an_geometry(p->sp_analyzer_bytes,
	    p->sp_analyzer_window_ns, p->sp_analyzer_subwindows,
	    p->sp_analyzer_threshold_ppm, an, &rule);

	an->clients = p->sp_analyzer_clients != 0;
	if (rc != 0)
		REFUSE("%s", rule);
	return 0;
}

/* The one set of rules for creation parameters: shmt_create applies it,
 * and so may anyone who wants to know before creating. */
SHMT_EXPORT int
shmt_config_check(const shmt_config_t *cfg, char *why, size_t why_len)
{
	struct shmt_params p;
	struct shmt_store d, c;
	struct shmt_an an;
	uint64_t dsize, csize;
	int rc;

	if (why != NULL && why_len > 0)
		why[0] = '\0';
	if (cfg == NULL)
		REFUSE("cfg: NULL");
	if ((cfg->mode & ~(mode_t)0777) != 0)
		REFUSE("mode: only the permission bits 0777 may be set");
	/* A segment that every user may write is trusted by nobody. */
	if ((cfg->mode & S_IWOTH) != 0)
		REFUSE("mode: a segment every user may write (o+w) is trusted by "
		    "nobody");
	if (cfg->max_limiters == 0 || cfg->max_limiters > 4096)
		REFUSE("max_limiters: must be from 1 to 4096");
	if (cfg->max_slots == 0 || cfg->max_slots > 65536)
		REFUSE("max_slots: must be from 1 to 65536");
	if (cfg->arena_bytes < (64ULL << 10) || cfg->arena_bytes > (1ULL << 40))
		REFUSE("arena_bytes: must be from 64 KiB to 1 TiB");
	if (cfg->dict_eviction > 1)
		REFUSE("dict_eviction: must be 0 or 1");
	if (cfg->analyzer_clients > 1)
		REFUSE("analyzer_clients: must be 0 or 1");
	if (cfg->dict_max_key > SHMT_KEY_MAX)
		REFUSE("dict_max_key: at most SHMT_KEY_MAX (%d) bytes",
		    SHMT_KEY_MAX);
	params_from(cfg, &p);
	if ((rc = stores_geometry(&p, &d, &c, &dsize, &csize, why,
	    why_len)) != 0)
		return rc;
	return an_geometry(&p, &an, why, why_len);
}

#undef REFUSE

/* Lay the regions out page by page; returns the total size, or 0 when the
 * parameters make no valid segment. */
static uint64_t
layout(const struct shmt_params *p, struct shmt_region reg[SHMT_R_COUNT])
{
	struct shmt_store d, c;
	struct shmt_an an;
	uint64_t off = 0, dsize, csize;

	if (stores_geometry(p, &d, &c, &dsize, &csize, NULL, 0) != 0 ||
	    an_geometry(p, &an, NULL, 0) != 0)
		return 0;
	const uint64_t sizes[SHMT_R_COUNT] = {
		[SHMT_R_HEADER] = sizeof(struct shmt_hdr),
		[SHMT_R_SLOTS] = (uint64_t)p->sp_max_slots * sizeof(struct shmt_slot),
		[SHMT_R_LIMITERS] =
		    (uint64_t)p->sp_max_limiters * sizeof(struct shmt_lim),
		[SHMT_R_ARENA] = p->sp_arena_bytes,
		[SHMT_R_DICT] = dsize,
		[SHMT_R_COUNTERS] = csize,
		[SHMT_R_ANALYZER] = an.bytes,
	};

	for (int i = 0; i < SHMT_R_COUNT; i++) {
		reg[i].rg_off = off;
		reg[i].rg_size = sizes[i];
		off = round_up(off + sizes[i], SHMT_PAGE);
	}
	return off;
}

static const char *const region_names[SHMT_R_COUNT] = {
	[SHMT_R_HEADER] = "header",
	[SHMT_R_SLOTS] = "slots",
	[SHMT_R_LIMITERS] = "limiters",
	[SHMT_R_ARENA] = "arena",
	[SHMT_R_DICT] = "dictionary",
	[SHMT_R_COUNTERS] = "counters",
	[SHMT_R_ANALYZER] = "analyzer",
};

static shmt_t *
handle_new(const char *name, char *base, uint64_t size,
    const struct shmt_region reg[SHMT_R_COUNT], const struct shmt_params *p)
{
	shmt_t *h = calloc(1, sizeof(*h));
	uint64_t dsize, csize;

	if (h == NULL)
		return NULL;
	h->dict = calloc(1, sizeof(*h->dict));
	h->counters = calloc(1, sizeof(*h->counters));
	if (h->dict == NULL || h->counters == NULL ||
	    stores_geometry(p, h->dict, h->counters, &dsize, &csize, NULL,
	    0) != 0) {
		free(h->dict);
		free(h->counters);
		free(h);
		return NULL;
	}
	h->dict->base = base + reg[SHMT_R_DICT].rg_off;
	h->counters->base = base + reg[SHMT_R_COUNTERS].rg_off;
	h->dict->h = h;
	h->counters->h = h;
	if (p->sp_analyzer_bytes != 0) {
		h->an = calloc(1, sizeof(*h->an));
		if (h->an == NULL || an_geometry(p, h->an, NULL, 0) != 0) {
			free(h->an);
			free(h->dict);
			free(h->counters);
			free(h);
			return NULL;
		}
		h->an->base = base + reg[SHMT_R_ANALYZER].rg_off;
	}
	{
		static atomic_uint uids;

		h->uid = atomic_fetch_add(&uids, 1) + 1;
	}
	h->base = base;
	h->size = size;
	h->hdr = (struct shmt_hdr *)base;
	memcpy(h->reg, reg, sizeof(h->reg));
	/* The one read of the secret: a later writer of the segment cannot
	 * change how this handle hashes. */
	memcpy(h->key.hk_key, ((const struct shmt_hdr *)base)->sh_secret,
	    sizeof(h->key.hk_key));
	h->slot = UINT32_MAX;
	h->fd = -1;
	h->pid = getpid();
	shmt__fork_attach(h);
	snprintf(h->name, sizeof(h->name), "%s", name);
	return h;
}

static void
handle_free(shmt_t *h)
{
	if (h == NULL)
		return;
	if (h->fd >= 0)
		close(h->fd);
	shmt__lviews_free(h);
	free(h->dict);
	free(h->counters);
	free(h->an);
	free(h);
}

/* Fill BUF with N bytes from the kernel's random source: 0 or -errno.  It
 * blocks only until the kernel's pool is first initialised (early boot). */
static int
secret_make(uint8_t *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = getrandom(buf + got, n - got, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)r;
	}
	return 0;
}

void
shmt__secret_set(shmt_t *h, const uint8_t key[SHMT_SECRET_BYTES])
{
	memcpy(h->hdr->sh_secret, key, SHMT_SECRET_BYTES);
	memcpy(h->key.hk_key, key, SHMT_SECRET_BYTES);
}

static void
hdr_init(struct shmt_hdr *hdr, const struct shmt_params *p, uint64_t size,
    const struct shmt_region reg[SHMT_R_COUNT])
{
	struct timespec ts;

	hdr->sh_format = shmt__format_word();
	hdr->sh_size = size;
	hdr->sh_abi = SHMT_ABI_VERSION;
	hdr->sh_nregions = SHMT_R_COUNT;
	for (int i = 0; i < SHMT_R_COUNT; i++)
		hdr->sh_regions[i] = reg[i];
	hdr->sh_params = *p;
	clock_gettime(CLOCK_REALTIME, &ts);
	hdr->sh_created_wall_ns =
	    (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	hdr->sh_created_mono_ns = shmt__mono_ns();
	hdr->sh_generation = 1;
}

SHMT_EXPORT int
shmt_create(const char *name, const shmt_config_t *cfg, shmt_t **out)
{
	static atomic_uint counter;
	struct shmt_region reg[SHMT_R_COUNT];
	shmt_config_t defaults;
	char tmp[SHMT_SEGNAME_MAX + 64];
	char tmppath[sizeof(tmp) + sizeof(SHMT_SHM_DIR)];
	char path[SHMT_SEGNAME_MAX + sizeof(SHMT_SHM_DIR) + 1];
	struct shmt_params params;
	struct shmt_hdr *hdr;
	uint64_t size;
	shmt_t *h = NULL;
	void *base = MAP_FAILED;
	int saved = errno;
	int fd = -1, rc;

	if ((rc = shmt__name_check(name)) != 0)
		return rc;
	if (out == NULL)
		return -EINVAL;
	if (cfg == NULL) {
		shmt_config_init(&defaults);
		cfg = &defaults;
	}
	if ((rc = shmt_config_check(cfg, NULL, 0)) != 0)
		return rc;
	params_from(cfg, &params);
	if ((size = layout(&params, reg)) == 0)
		return -EINVAL;

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%u", name, (int)getpid(),
	    atomic_fetch_add(&counter, 1));
	snprintf(tmppath, sizeof(tmppath), SHMT_SHM_DIR "%s", tmp);
	snprintf(path, sizeof(path), SHMT_SHM_DIR "%s", name);

	fd = shm_open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	/* The umask must not narrow what the caller asked for. */
	if (fchmod(fd, cfg->mode) != 0 ||
	    (cfg->gid != (gid_t)-1 && fchown(fd, (uid_t)-1, cfg->gid) != 0)) {
		rc = -errno;
		goto out_unlink;
	}
	/* Reserve the memory now: a tmpfs that fills up later would kill the
	 * users with SIGBUS instead of failing here. */
	if ((rc = posix_fallocate(fd, 0, (off_t)size)) != 0) {
		rc = rc == ENOSPC ? -ENOSPC : -rc;
		goto out_unlink;
	}
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		goto out_unlink;
	}
	hdr = base;
	hdr_init(hdr, &params, size, reg);
	if ((rc = secret_make(hdr->sh_secret, sizeof(hdr->sh_secret))) != 0)
		goto out_unlink;
	shmt__lock_init(&hdr->sh_table_lock);
	if ((h = handle_new(name, base, size, reg, &params)) == NULL) {
		rc = -ENOMEM;
		goto out_unlink;
	}
	if ((rc = shmt__store_init(h->dict)) != 0 ||
	    (rc = shmt__store_init(h->counters)) != 0)
		goto out_unlink;
	/* The magic goes last: a reader that sees it sees everything. */
	__atomic_store_n(&hdr->sh_magic, SHMT_MAGIC, __ATOMIC_RELEASE);

	if (link(tmppath, path) != 0) {
		rc = -errno;
		goto out_unlink;
	}
	shm_unlink(tmp);
	h->fd = fd;
	fd = -1;
	if ((rc = shmt__slot_claim(h)) != 0) {
		shm_unlink(name);
		goto out;
	}
	*out = h;
	errno = saved;
	return 0;

out_unlink:
	shm_unlink(tmp);
out:
	handle_free(h);
	if (base != MAP_FAILED)
		munmap(base, size);
	if (fd >= 0)
		close(fd);
	errno = saved;
	return rc;
}

/*
 * Validate HDR, a private copy of the header of an object of SIZE bytes:
 * magic, format, size, then every region inside the object, in order,
 * without overlap, and the creation parameters against the regions.  Fills
 * REG.  It works on a copy because another process may change the header
 * while we read it: what is validated must be what is used.
 */
static int
validate(const struct shmt_hdr *hdr, uint64_t size,
    struct shmt_region reg[SHMT_R_COUNT])
{
	uint64_t end = 0;

	if (hdr->sh_magic != SHMT_MAGIC)
		return SHMT_EMAGIC;
	if (size < sizeof(struct shmt_hdr))
		return SHMT_ESIZE;
	if (hdr->sh_format != shmt__format_word() ||
	    hdr->sh_abi != SHMT_ABI_VERSION)
		return SHMT_EFORMAT;
	if (hdr->sh_size != size)
		return SHMT_ESIZE;
	if (hdr->sh_nregions != SHMT_R_COUNT)
		return SHMT_ECORRUPT;
	for (int i = 0; i < SHMT_R_COUNT; i++) {
		uint64_t off = hdr->sh_regions[i].rg_off;
		uint64_t len = hdr->sh_regions[i].rg_size;

		if (off < end || off > size || len > size - off ||
		    off % SHMT_LINE != 0)
			return SHMT_ECORRUPT;
		reg[i].rg_off = off;
		reg[i].rg_size = len;
		end = off + len;
	}
	if (reg[SHMT_R_HEADER].rg_off != 0 ||
	    reg[SHMT_R_HEADER].rg_size < sizeof(struct shmt_hdr))
		return SHMT_ECORRUPT;
	{
		/* The creation parameters must give exactly this layout. */
		struct shmt_region want[SHMT_R_COUNT];
		struct shmt_params p = hdr->sh_params;

		if (layout(&p, want) == 0)
			return SHMT_ECORRUPT;
		for (int i = 1; i < SHMT_R_COUNT; i++)
			if (want[i].rg_size != reg[i].rg_size)
				return SHMT_ECORRUPT;
	}
	return 0;
}

SHMT_EXPORT void
shmt_open_opts_init(shmt_open_opts_t *o)
{
	if (o == NULL)
		return;
	memset(o, 0, sizeof(*o));
	o->owner = (uid_t)-1;
}

/* 1 when GID is the caller's effective group or one of its supplementary
 * groups. */
static int
in_group(gid_t gid)
{
	gid_t *list;
	int n, yes = 0;

	if (gid == getegid())
		return 1;
	n = getgroups(0, NULL);
	if (n <= 0)
		return 0;
	list = calloc((size_t)n, sizeof(*list));
	if (list == NULL)
		return 0;
	n = getgroups(n, list);
	for (int i = 0; i < n && !yes; i++)
		yes = list[i] == gid;
	free(list);
	return yes;
}

/*
 * Whether the caller may trust what the object ST holds.  Whoever can write
 * the object can also truncate it (which kills its users with SIGBUS) and
 * forge its contents, so the writers must be people the caller trusts:
 * - never an object that every user may write (mode o+w);
 * - an object owned by the caller's effective user, by root, or by the
 *   user the caller names (OWNER);
 * - for a caller other than root, also an object whose group is one of the
 *   caller's groups and which that group may write: the caller already
 *   shares the object with every member of that group, and this is how
 *   workers in the daemon's group attach to a 0660 segment owned by the
 *   daemon's user.  Root never trusts a group this way: a privileged
 *   process names the owner it trusts.
 */
static int
owner_trusted(const struct stat *st, uid_t owner)
{
	uid_t me = geteuid();

	if (st->st_mode & S_IWOTH)
		return SHMT_EUNTRUSTED;
	if (st->st_uid == me || st->st_uid == 0 ||
	    (owner != (uid_t)-1 && st->st_uid == owner))
		return 0;
	if (me != 0 && (st->st_mode & S_IWGRP) && in_group(st->st_gid))
		return 0;
	return SHMT_EUNTRUSTED;
}

SHMT_EXPORT int
shmt_open(const char *name, shmt_t **out)
{
	return shmt_open_opts(name, NULL, out);
}

/* Open NAME and check the object before anything is read from it: a
 * regular object whose writers are trusted.  Returns the descriptor in *FD
 * and its status in *ST, or an error. */
static int
object_open(const char *name, uid_t owner, int *fd, struct stat *st)
{
	int rc;

	*fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (*fd < 0)
		return -errno;
	if (fstat(*fd, st) != 0)
		rc = -errno;
	else if (!S_ISREG(st->st_mode))
		rc = SHMT_ENOTREG;
	else
		rc = owner_trusted(st, owner);
	if (rc != 0)
		close(*fd);
	return rc;
}

/* Read the header of the object FD of SIZE bytes once into *HC (private
 * memory) and validate that copy, filling REG.  By pread, not through a
 * mapping: an object truncated meanwhile gives a short read, not SIGBUS. */
static int
header_read(int fd, uint64_t size, struct shmt_hdr *hc,
    struct shmt_region reg[SHMT_R_COUNT])
{
	if (size < sizeof(*hc)) {
		/* Too small to hold a header: tell a foreign object (bad
		 * magic) from a truncated segment when the magic fits. */
		uint64_t magic = 0;

		if (size >= sizeof(magic) &&
		    pread(fd, &magic, sizeof(magic), 0) == sizeof(magic) &&
		    magic != SHMT_MAGIC)
			return SHMT_EMAGIC;
		return SHMT_ESIZE;
	}
	if (pread(fd, hc, sizeof(*hc), 0) != (ssize_t)sizeof(*hc))
		return SHMT_ESIZE;
	return validate(hc, size, reg);
}

SHMT_EXPORT int
shmt_open_opts(const char *name, const shmt_open_opts_t *opts, shmt_t **out)
{
	struct shmt_region reg[SHMT_R_COUNT];
	struct shmt_hdr hc;
	struct stat st;
	shmt_t *h = NULL;
	void *base = MAP_FAILED;
	uint64_t size = 0;
	int saved = errno;
	int fd = -1, rc;

	if ((rc = shmt__name_check(name)) != 0)
		return rc;
	if (out == NULL)
		return -EINVAL;
	rc = object_open(name, opts != NULL ? opts->owner : (uid_t)-1, &fd, &st);
	if (rc != 0) {
		errno = saved;
		return rc;
	}
	size = (uint64_t)st.st_size;
	/* Everything the handle trusts (regions, store and analyzer geometry,
	 * limiter table size) comes from this one private copy, never from a
	 * second read of the segment. */
	if ((rc = header_read(fd, size, &hc, reg)) != 0)
		goto fail;
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		goto fail;
	}
	if ((h = handle_new(name, base, size, reg, &hc.sh_params)) == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	h->fd = fd;
	fd = -1;
	if ((rc = shmt__slot_claim(h)) != 0)
		goto fail;
	*out = h;
	errno = saved;
	return 0;
fail:
	handle_free(h);
	if (base != MAP_FAILED)
		munmap(base, size);
	if (fd >= 0)
		close(fd);
	errno = saved;
	return rc;
}

int
shmt__size_check(shmt_t *h, uint64_t *now_size)
{
	int saved = errno;
	struct stat st;
	int rc = 0;

	*now_size = h->size;
	if (h->fd >= 0 && fstat(h->fd, &st) == 0 &&
	    (uint64_t)st.st_size < h->size) {
		*now_size = (uint64_t)st.st_size;
		rc = SHMT_ESIZE;
	}
	errno = saved;
	return rc;
}

SHMT_EXPORT void
shmt_close(shmt_t *h)
{
	int saved = errno;
	uint64_t now_size;

	if (h == NULL)
		return;
	/* A handle inherited across fork() belongs to the parent's slot.  A
	 * truncated object has no slot page to release any more. */
	if (h->pid == getpid() && shmt__size_check(h, &now_size) == 0) {
		shmt__an_release(h);
		shmt__slot_release(h);
	}
	munmap(h->base, h->size);
	handle_free(h);
	errno = saved;
}

SHMT_EXPORT int
shmt_unlink(const char *name)
{
	int saved = errno;
	int rc;

	if ((rc = shmt__name_check(name)) != 0)
		return rc;
	rc = shm_unlink(name) == 0 ? 0 : -errno;
	errno = saved;
	return rc;
}

SHMT_EXPORT const char *
shmt_name(const shmt_t *h)
{
	return h != NULL ? h->name : NULL;
}

SHMT_EXPORT int
shmt_set_clock(shmt_t *h, shmt_clock_fn fn, void *ctx)
{
	if (h == NULL)
		return -EINVAL;
	h->clock = fn;
	h->clock_ctx = fn != NULL ? ctx : NULL;
	return 0;
}

SHMT_EXPORT shmt_time_t
shmt_now(shmt_t *h)
{
	return h != NULL ? shmt__now(h) : shmt__mono_ns();
}

SHMT_EXPORT int
shmt_segment_stat(shmt_t *h, shmt_segment_stat_t *out)
{
	const struct shmt_hdr *hdr;
	const struct shmt_lim *lim;
	uint32_t nlim, n = 0;

	uint64_t now_size;

	if (h == NULL || out == NULL)
		return -EINVAL;
	if (shmt__size_check(h, &now_size) != 0)
		return SHMT_ESIZE;
	hdr = h->hdr;
	memset(out, 0, sizeof(*out));
	out->size = h->size;
	out->format = hdr->sh_format;
	out->abi_version = hdr->sh_abi;
	out->nregions = SHMT_R_COUNT;
	for (int i = 0; i < SHMT_R_COUNT; i++) {
		snprintf(out->regions[i].name, sizeof(out->regions[i].name),
		    "%s", region_names[i]);
		out->regions[i].offset = h->reg[i].rg_off;
		out->regions[i].size = h->reg[i].rg_size;
	}
	nlim = (uint32_t)(h->reg[SHMT_R_LIMITERS].rg_size / sizeof(*lim));
	lim = shmt__region(h, SHMT_R_LIMITERS);
	for (uint32_t i = 0; i < nlim; i++)
		if (__atomic_load_n(&lim[i].lm_state, __ATOMIC_ACQUIRE) ==
		    SHMT_LIM_READY)
			n++;
	out->max_limiters = nlim;
	out->limiters = n;
	out->regions[SHMT_R_HEADER].used = sizeof(struct shmt_hdr);
	out->regions[SHMT_R_LIMITERS].used = (uint64_t)n * sizeof(*lim);
	out->regions[SHMT_R_ARENA].used =
	    __atomic_load_n(&hdr->sh_arena_used, __ATOMIC_RELAXED);
	out->regions[SHMT_R_DICT].used = shmt__store_used(h->dict);
	out->regions[SHMT_R_COUNTERS].used = shmt__store_used(h->counters);
	out->regions[SHMT_R_ANALYZER].used = h->reg[SHMT_R_ANALYZER].rg_size;
	out->max_slots =
	    (uint32_t)(h->reg[SHMT_R_SLOTS].rg_size / sizeof(struct shmt_slot));
	shmt__slots_count(h, &out->slots, &out->slots_stale);
	out->regions[SHMT_R_SLOTS].used =
	    (uint64_t)out->slots * sizeof(struct shmt_slot);
	out->mode = (mode_t)(hdr->sh_params.sp_mode & 0777);
	out->created_wall_ns = hdr->sh_created_wall_ns;
	out->daemon_pid = __atomic_load_n(&hdr->sh_daemon_pid, __ATOMIC_ACQUIRE);
	out->daemon_alive = out->daemon_pid > 0 && out->daemon_pid < INT32_MAX &&
	    shmt__pid_alive((pid_t)out->daemon_pid,
	    __atomic_load_n(&hdr->sh_daemon_start, __ATOMIC_RELAXED));
	out->daemon_heartbeat_ns =
	    __atomic_load_n(&hdr->sh_heartbeat_ns, __ATOMIC_RELAXED);
	out->daemon_lag_ns = __atomic_load_n(&hdr->sh_lag_ns, __ATOMIC_RELAXED);
	out->housekeeping_runs = __atomic_load_n(&hdr->sh_hk_runs, __ATOMIC_RELAXED);
	out->slots_reaped = __atomic_load_n(&hdr->sh_reaped, __ATOMIC_RELAXED);
	return 0;
}
