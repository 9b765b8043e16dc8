/* SPDX-License-Identifier: MIT */
/*
 * The segment as a format: the creation parameters and their one set of
 * rules (shmt_config_check), the regions laid out from them, the format
 * word, and the header written at creation and validated at every open.
 * Nothing here maps or opens anything (segment.c does).
 */
#include "layout.h"

#include "analyzer.h"
#include "counters.h"
#include "dict.h"
#include "gcra.h"
#include "limiter.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* The largest TTL any write accepts, in milliseconds (dict.c's bound). */
#define TTL_MS_MAX (UINT64_MAX / 2000000)

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
	cfg->arena_bytes = 8ULL << 20;
	/* 8 MiB of heap and, beside it, 4 MiB of index (65,536 slots): the
	 * default segment stays under half of a container's default 64 MiB
	 * /dev/shm, which a move needs twice. */
	cfg->dict_bytes = 8ULL << 20;
	cfg->dict_shards = 4;
	cfg->dict_eviction = 1;
	cfg->counters_bytes = 4ULL << 20;
	cfg->counters_shards = 4;
	cfg->counters_subwindows = 24;
	cfg->counters_window_ns = 24ULL * 3600 * 1000000000ULL;
	cfg->counters_error_ppm = 10000;
	cfg->analyzer_bytes = 1ULL << 20;
	cfg->analyzer_window_ns = 60ULL * 1000000000ULL;
	cfg->analyzer_subwindows = 12;
	cfg->analyzer_threshold_ppm = 100000;
	cfg->analyzer_clients = 0;
	cfg->dict_max_key = SHMT_KEY_MAX;
	cfg->dict_max_value = SHMT_VALUE_MAX;
	cfg->dict_default_ttl_ms = 0;
}

/*
 * The format word: ABI version in the top 16 bits, and a hash of the size,
 * alignment and key offsets of every shared type in the rest.  Any change of
 * layout, compiler padding or lock word size gives another word, so a
 * mismatched reader is refused (SHMT_EFORMAT) instead of guessing.
 */
uint64_t
shmt__format_word(void)
{
	uint64_t h = SHMT_FNV_INIT;
	const uint64_t facts[] = {
		sizeof(struct shmt_hdr), alignof(struct shmt_hdr),
		sizeof(struct shmt_params),
		offsetof(struct shmt_hdr, sh_daemon_pid),
		offsetof(struct shmt_hdr, sh_table_lock),
		offsetof(struct shmt_hdr, sh_secret), SHMT_SECRET_BYTES,
		offsetof(struct shmt_hdr, sh_retired),
		offsetof(struct shmt_hdr, sh_timens_ino),
		sizeof(struct shmt_lock),
		sizeof(struct shmt_slot), alignof(struct shmt_slot),
		sizeof(struct shmt_lim), alignof(struct shmt_lim),
		offsetof(struct shmt_lim, lm_w),
		offsetof(struct shmt_lim, lm_released_uses),
		offsetof(struct shmt_lim, lm_burst),
		offsetof(struct shmt_lim, lm_ov_off),
		offsetof(struct shmt_lim, lm_denied_by_rule),
		sizeof(struct shmt_override),
		offsetof(struct shmt_client, ce_rule),
		offsetof(struct shmt_lim, lm_would_deny),
		offsetof(struct shmt_lim, lm_wake),
		sizeof(struct shmt_client), alignof(struct shmt_client),
		sizeof(struct shmt_ring_slot), sizeof(struct shmt_log_slot),
		sizeof(struct shmt_w), SHMT_LINE, SHMT_LIMITER_NAME_MAX,
		sizeof(struct shmt_shard), offsetof(struct shmt_shard, ds_seq),
		sizeof(struct shmt_item), sizeof(struct shmt_fblock),
		sizeof(struct shmt_bucket), offsetof(struct shmt_item, it_lens),
		sizeof(struct shmt_an_owner), sizeof(struct shmt_an_sum),
		SHMT_AN_TAG_SHIFT, SHMT_AN_PROBE_STEP, SHMT_AN_PROBE_MAX,
		SHMT_AN_SLICES, sizeof(struct shmt_an_name),
		sizeof(struct shmt_an_mark), SHMT_AN_SEQ_BITS,
		SHMT_AN_PIECES_MIN, SHMT_AN_PIECES_MAX,
		offsetof(struct shmt_an_sum, am_rlog), SHMT_AN_REC_QBITS,
		SHMT_AN_REC_MAX, SHMT_AN_REC_OFF,
		SHMT_AN_STRIPES, SHMT_ORDER_MAX,
		offsetof(struct shmt_params, sp_counters_error_ppm),
		sizeof(struct shmt_cnt_hdr), SHMT_CNT_FORMAT,
		SHMT_HASH_ID,
		GCRA_COUNT_SHIFT, GCRA_COUNT_MAX,
	};

	for (size_t i = 0; i < sizeof(facts) / sizeof(facts[0]); i++)
		h = shmt__fnv1a_u64(h, facts[i]);
	return ((uint64_t)SHMT_ABI_VERSION << 48) | (h & 0xffffffffffffULL);
}

#define REFUSE(...) do { \
		if (why != NULL && why_len > 0) \
			snprintf(why, why_len, __VA_ARGS__); \
		return -EINVAL; \
	} while (0)

/* The trusted geometry of both stores, from the creation parameters:
 * 0, or -EINVAL with WHY (may be NULL) naming the parameter and the rule. */
int
shmt__stores_geometry(const struct shmt_params *p, struct shmt_store *dict,
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
	ctr->window = p->sp_counters_window_ns;
	ctr->cnt_error_ppm = p->sp_counters_error_ppm;
	ctr->max_key = SHMT_KEY_MAX;
	ctr->max_value = SHMT_VALUE_MAX;
	/* The counters keep no sub-windows any more; the field is still
	 * checked as before so that configs and snapshots that set it load
	 * alike. */
	if (p->sp_counters_bytes != 0 && (p->sp_counters_subwindows == 0 ||
	    p->sp_counters_subwindows > 256))
		REFUSE("counters_subwindows: must be from 1 to 256");
	if (p->sp_counters_bytes != 0 && ctr->window == 0)
		REFUSE("counters_window_ns: must be at least 1 nanosecond");
	if (p->sp_counters_bytes != 0 && (ctr->cnt_error_ppm < 1000 ||
	    ctr->cnt_error_ppm > 500000))
		REFUSE("counters_error_ppm: must be from 1000 (0.1%%) to 500000 "
		    "(50%%)");
	ctr->cnt_k = ctr->cnt_error_ppm != 0 ?
	    shmt__cnt_k(ctr->cnt_error_ppm) : 1;
	return 0;
}

void
shmt__params_from(const shmt_config_t *cfg, struct shmt_params *p)
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
	/* 0 stands for the default, as for the dictionary's limits below. */
	p->sp_counters_error_ppm = cfg->counters_error_ppm != 0 ?
	    cfg->counters_error_ppm : 10000;
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

void
shmt__config_from_params(const struct shmt_params *p, shmt_config_t *c)
{
	shmt_config_init(c);
	c->mode = (mode_t)(p->sp_mode & 0777);
	c->gid = (gid_t)p->sp_gid;
	c->max_limiters = p->sp_max_limiters;
	c->max_slots = p->sp_max_slots;
	c->arena_bytes = p->sp_arena_bytes;
	c->dict_bytes = p->sp_dict_bytes;
	c->dict_shards = p->sp_dict_shards;
	c->dict_eviction = p->sp_dict_eviction;
	c->counters_bytes = p->sp_counters_bytes;
	c->counters_shards = p->sp_counters_shards;
	c->counters_subwindows = p->sp_counters_subwindows;
	c->counters_window_ns = p->sp_counters_window_ns;
	c->counters_error_ppm = p->sp_counters_error_ppm;
	c->analyzer_bytes = p->sp_analyzer_bytes;
	c->analyzer_window_ns = p->sp_analyzer_window_ns;
	c->analyzer_subwindows = p->sp_analyzer_subwindows;
	c->analyzer_threshold_ppm = p->sp_analyzer_threshold_ppm;
	c->analyzer_clients = p->sp_analyzer_clients;
	c->dict_max_key = p->sp_dict_max_key;
	c->dict_max_value = p->sp_dict_max_value;
	c->dict_default_ttl_ms = p->sp_dict_default_ttl_ms;
}

int
shmt__params_an_geometry(const struct shmt_params *p, struct shmt_an *an,
    char *why,
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
	shmt__params_from(cfg, &p);
	if ((rc = shmt__stores_geometry(&p, &d, &c, &dsize, &csize, why,
	    why_len)) != 0)
		return rc;
	return shmt__params_an_geometry(&p, &an, why, why_len);
}

#undef REFUSE

/* Lay the regions out page by page; returns the total size, or 0 when the
 * parameters make no valid segment. */
uint64_t
shmt__layout(const struct shmt_params *p, struct shmt_region reg[SHMT_R_COUNT])
{
	struct shmt_store d, c;
	struct shmt_an an;
	uint64_t off = 0, dsize, csize;

	if (shmt__stores_geometry(p, &d, &c, &dsize, &csize, NULL, 0) != 0 ||
	    shmt__params_an_geometry(p, &an, NULL, 0) != 0)
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
		off = shmt__align_up(off + sizes[i], SHMT_PAGE);
	}
	return off;
}

const char *const shmt__region_names[SHMT_R_COUNT] = {
	[SHMT_R_HEADER] = "header",
	[SHMT_R_SLOTS] = "slots",
	[SHMT_R_LIMITERS] = "limiters",
	[SHMT_R_ARENA] = "arena",
	[SHMT_R_DICT] = "dictionary",
	[SHMT_R_COUNTERS] = "counters",
	[SHMT_R_ANALYZER] = "analyzer",
};

void
shmt__hdr_init(struct shmt_hdr *hdr, const struct shmt_params *p, uint64_t size,
    const struct shmt_region reg[SHMT_R_COUNT])
{
	hdr->sh_format = shmt__format_word();
	hdr->sh_size = size;
	hdr->sh_abi = SHMT_ABI_VERSION;
	hdr->sh_nregions = SHMT_R_COUNT;
	for (int i = 0; i < SHMT_R_COUNT; i++)
		hdr->sh_regions[i] = reg[i];
	hdr->sh_params = *p;
	hdr->sh_created_wall_ns = shmt__clock_ns(CLOCK_REALTIME);
	hdr->sh_created_mono_ns = shmt__mono_ns();
	hdr->sh_generation = 1;
	shmt__ns_get(hdr);
}

void
shmt__ns_get(struct shmt_hdr *hdr)
{
	uint64_t id[2];

	shmt__env_ns("pid", id);
	hdr->sh_pidns_dev = id[0];
	hdr->sh_pidns_ino = id[1];
	shmt__env_ns("time", id);
	hdr->sh_timens_dev = id[0];
	hdr->sh_timens_ino = id[1];
}

/* SHMT_ENAMESPACE when the creator recorded in HDR (a validated copy) ran
 * in another PID or time namespace than this process, else 0.  A part the
 * creator or this process could not read (0) is not compared. */
int
shmt__ns_check(const struct shmt_hdr *hdr)
{
	struct shmt_hdr me;

	shmt__ns_get(&me);
	if (hdr->sh_pidns_ino != 0 && me.sh_pidns_ino != 0 &&
	    (hdr->sh_pidns_ino != me.sh_pidns_ino ||
	    hdr->sh_pidns_dev != me.sh_pidns_dev))
		return SHMT_ENAMESPACE;
	if (hdr->sh_timens_ino != 0 && me.sh_timens_ino != 0 &&
	    (hdr->sh_timens_ino != me.sh_timens_ino ||
	    hdr->sh_timens_dev != me.sh_timens_dev))
		return SHMT_ENAMESPACE;
	return 0;
}

/*
 * Validate HDR, a private copy of the header of an object of SIZE bytes:
 * magic, format, size, then every region inside the object, in order,
 * without overlap, and the creation parameters against the regions.  Fills
 * REG.  It works on a copy because another process may change the header
 * while we read it: what is validated must be what is used.
 */
int
shmt__hdr_validate(const struct shmt_hdr *hdr, uint64_t size,
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

		if (shmt__layout(&p, want) == 0)
			return SHMT_ECORRUPT;
		for (int i = 1; i < SHMT_R_COUNT; i++)
			if (want[i].rg_size != reg[i].rg_size)
				return SHMT_ECORRUPT;
	}
	return 0;
}
