/* SPDX-License-Identifier: MIT */
/*
 * Process slots: one per attached handle, holding the pid and the start time
 * of the process, so the daemon (or anyone) can tell a dead process from a
 * live one and free its slot.  A slot is claimed by CAS on sl_pid from 0.
 *
 * Reaping rechecks before it frees, as LMDB's reader table does: a slot is
 * freed only by a CAS from the exact pid found dead, and the start time
 * tells a reused pid from the process that claimed the slot.
 *
 * A claim takes two steps, so that no reaper ever judges a claimer by the
 * start time its slot's last holder left there: the CAS from 0 stores the
 * pid with SLOT_CLAIMING set, then the claimer stores its start time and
 * only then its plain pid (release).  A reaper that finds SLOT_CLAIMING
 * frees the slot only when kill(2) says that process does not exist (a
 * claimer killed between the steps); a claimer still at work keeps it.
 */
#include "segment.h"

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct shmt_slot *
slots(const shmt_t *h, uint32_t *n)
{
	*n = (uint32_t)(h->reg[SHMT_R_SLOTS].rg_size / sizeof(struct shmt_slot));
	return shmt__region(h, SHMT_R_SLOTS);
}

/* sl_pid while its process claims the slot (pids are below 2^31). */
#define SLOT_CLAIMING 0x80000000U

static int
claim_once(shmt_t *h)
{
	uint32_t n, pid = (uint32_t)h->pid;
	struct shmt_slot *s = slots(h, &n);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t expect = 0;

		if (__atomic_load_n(&s[i].sl_pid, __ATOMIC_RELAXED) != 0)
			continue;
		if (!__atomic_compare_exchange_n(&s[i].sl_pid, &expect,
		    pid | SLOT_CLAIMING, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		__atomic_store_n(&s[i].sl_start, shmt__proc_start(h->pid),
		    __ATOMIC_RELAXED);
		__atomic_store_n(&s[i].sl_attached_ns, shmt__mono_ns(),
		    __ATOMIC_RELAXED);
		/* From our mark only: a slot freed under us (by a reaper that
		 * took us for dead, which a live claimer never is) and taken
		 * by another is left to it, and we look further. */
		expect = pid | SLOT_CLAIMING;
		if (!__atomic_compare_exchange_n(&s[i].sl_pid, &expect, pid, 0,
		    __ATOMIC_RELEASE, __ATOMIC_RELAXED))
			continue;
		h->slot = i;
		return 0;
	}
	return SHMT_ENOSLOT;
}

int
shmt__slot_claim(shmt_t *h)
{
	if (claim_once(h) == 0)
		return 0;
	/* Full: free the slots of dead processes, then try once more. */
	if (shmt__slots_reap(h) > 0 && claim_once(h) == 0)
		return 0;
	return SHMT_ENOSLOT;
}

void
shmt__slot_release(shmt_t *h)
{
	uint32_t n, expect = (uint32_t)h->pid;
	struct shmt_slot *s = slots(h, &n);

	if (h->slot >= n)
		return;
	__atomic_store_n(&s[h->slot].sl_start, 0, __ATOMIC_RELAXED);
	__atomic_compare_exchange_n(&s[h->slot].sl_pid, &expect, 0, 0,
	    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	h->slot = UINT32_MAX;
}

int
shmt__slots_reap(shmt_t *h)
{
	uint32_t n;
	struct shmt_slot *s = slots(h, &n);
	int reaped = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t pid = __atomic_load_n(&s[i].sl_pid, __ATOMIC_ACQUIRE);
		uint64_t start = __atomic_load_n(&s[i].sl_start, __ATOMIC_RELAXED);

		if (pid == 0)
			continue;
		if (pid & SLOT_CLAIMING) {
			/* Half claimed: its start time is not yet the
			 * claimer's.  Freed only when that process is gone. */
			if ((pid & ~SLOT_CLAIMING) != 0 &&
			    shmt__pid_alive((pid_t)(pid & ~SLOT_CLAIMING), 0))
				continue;
		} else if (pid > INT32_MAX ||
		    shmt__pid_alive((pid_t)pid, start)) {
			continue;
		}
		if (__atomic_compare_exchange_n(&s[i].sl_pid, &pid, 0, 0,
		    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			reaped++;
	}
	if (reaped > 0)
		__atomic_fetch_add(&h->hdr->sh_reaped, (uint64_t)reaped,
		    __ATOMIC_RELAXED);
	return reaped;
}

void
shmt__slots_count(shmt_t *h, uint32_t *in_use, uint32_t *stale)
{
	uint32_t n, used = 0, dead = 0;
	struct shmt_slot *s = slots(h, &n);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t pid = __atomic_load_n(&s[i].sl_pid, __ATOMIC_ACQUIRE);

		if (pid == 0)
			continue;
		used++;
		if ((pid & SLOT_CLAIMING) ? !shmt__pid_alive((pid_t)(pid &
		    ~SLOT_CLAIMING), 0) : !shmt__pid_alive((pid_t)pid,
		    __atomic_load_n(&s[i].sl_start, __ATOMIC_RELAXED)))
			dead++;
	}
	*in_use = used;
	*stale = dead;
}

int
shmt__slot_has_thread(shmt_t *h, uint32_t tid)
{
	int saved = errno, found = 0;
	uint32_t n;
	struct shmt_slot *s = slots(h, &n);

	for (uint32_t i = 0; i < n && !found; i++) {
		uint32_t pid = __atomic_load_n(&s[i].sl_pid, __ATOMIC_ACQUIRE);

		if (pid == 0 || pid > INT32_MAX)
			continue;
		/* Only ESRCH says the thread is not there: any other
		 * failure (EPERM, or a filter that refuses the call) is
		 * taken as "it may be", never as dead. */
		found = syscall(SYS_tgkill, (pid_t)pid, (pid_t)tid, 0) == 0 ||
		    errno != ESRCH;
	}
	errno = saved;
	return found;
}

int
shmt__slot_held_by(shmt_t *h, pid_t pid)
{
	uint32_t n;
	struct shmt_slot *s = slots(h, &n);

	if (pid <= 0)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		if (__atomic_load_n(&s[i].sl_pid, __ATOMIC_RELAXED) ==
		    (uint32_t)pid)
			return 1;
	return 0;
}
