/* SPDX-License-Identifier: MIT */
/*
 * throttle.pml: the lock-free ring of buckets of lib/ring.c and lib/ring.h
 * (bk_take_loop, bk_release_step, shmt__bk_housekeep, slot_open,
 * shmt__slot_raise) as a Promela model,
 * so that spin checks the safety promise over every interleaving of three
 * callers, a ticker and a daemon at small bounds.  Keep it in step with
 * ring.c and ring.h: the comments below name the C code each part stands for.
 *
 * What is modelled
 *  - W = {inflight, count, tail, nsealed, active} read and CASed as one
 *    atomic word; ring slots {close, serial, count} changed by CAS only.
 *  - Time is a shared counter that only grows (the ticker); reading it is a
 *    step of its own, after reading W (or before, with -DBROKEN).
 *  - Every caller and the daemon may stop forever after any step (STOP):
 *    a kill -9 at that instruction.  The daemon may also never run at all
 *    (spin explores the runs in which it takes no step).
 *  - The monitor records every grant's decision time (the clock value the
 *    granting caller acted on) in the same atomic step as the grant's CAS,
 *    and asserts that no interval [a, a + C) holds more than L of them.
 *    A grant at time d raises only the windows that contain d, so those are
 *    the ones checked.
 *
 * Options (spin -D...): L, B, C, S (limit, slack_uses, window, slack in
 * ticks); NCALLERS (2 or 3); CALLS (calls per caller; CALLS0 for the
 * first); TMAX (last clock value); DAEMON (1: a daemon process runs DPASSES
 * housekeeping passes); BROKEN (read the clock before W: spin must find an
 * over-grant); ACCOUNT (also assert the bookkeeping: inflight equals the
 * uses in the buckets W names, and no caller gets SHMT_ECORRUPT from a
 * merely stale copy of W); KILL (0: no explicit kills); OLD_STALE and
 * OLD_SKIP (two earlier versions of the ring's code, kept so that the ACCOUNT
 * runs show the model finds their bugs: a stale copy of W taken for
 * corruption, and a skipped serial that dropped the oldest sealed bucket).
 * The defaults
 * suit simulation (spin -p); tests/model/spin_throttle.sh runs the verifications
 * at bounds whose state spaces fit in seconds.
 */

#ifndef L
#define L 2
#endif
#ifndef B
#define B 1
#endif
#ifndef C
#define C 2
#endif
#ifndef S
#define S 1
#endif
#ifndef CALLS
#define CALLS 2
#endif
#ifndef TMAX
#define TMAX 4
#endif
#ifndef DAEMON
#define DAEMON 1
#endif
#ifndef DPASSES
#define DPASSES 2
#endif
#ifndef CALLS0
#define CALLS0 CALLS
#endif
#ifndef KILL
#define KILL 1
#endif

#ifndef NCALLERS
#define NCALLERS 3
#endif
#define DIVUP(a, b) (((a) + (b) - 1) / (b))
#define NB (DIVUP(C, S) + DIVUP(L, B))

byte clock;

/* The state word W. */
byte w_inf, w_cnt, w_ns;
short w_tail;
bit w_act;

/* The ring: slot i starts with serial i - NB, older than any real one. */
byte r_close[NB];
short r_ser[NB];
byte r_cnt[NB];

/* The monitor: grants per decision time (a histogram, not a list, so that
 * the order in which grants were recorded does not multiply states). */
byte gcount[TMAX + 1];
byte mj, mk, mn;

/* A kill -9 after any step.  For assertions this adds nothing that never
 * scheduling the process again would not give, so KILL=0 is an honest way
 * to shrink a run; the default keeps it explicit. */
#if KILL
#define STOP if :: skip :: goto dead fi
#else
#define STOP skip
#endif

/* A 16-byte load of W into the caller's copy. */
inline read_w()
{
	d_step { inf = w_inf; cnt = w_cnt; tl = w_tail; ns = w_ns; act = w_act }
}

/* Bookkeeping (ACCOUNT): inflight is the sum of the uses W names. */
inline check_account()
{
#ifdef ACCOUNT
	mn = (w_act -> w_cnt : 0);
	mj = 0;
	do
	:: mj < w_ns ->
		assert(r_ser[(w_tail - w_ns + mj) % NB] == w_tail - w_ns + mj);
		mn = mn + r_cnt[(w_tail - w_ns + mj) % NB];
		mj++
	:: else -> break
	od;
	assert(mn == w_inf);
	mj = 0;
	mn = 0
#else
	skip
#endif
}

/* shmt__cas128 on W: on success W and the copy become the new word; on
 * failure the copy becomes the current word. */
inline cas_w(ninf, ncnt, ntl, nns, nact)
{
	d_step {
		if
		:: w_inf == inf && w_cnt == cnt && w_tail == tl && w_ns == ns &&
		   w_act == act ->
			w_inf = ninf; w_cnt = ncnt; w_tail = ntl; w_ns = nns;
			w_act = nact; ok = 1;
			check_account()
		:: else -> ok = 0
		fi;
		inf = w_inf; cnt = w_cnt; tl = w_tail; ns = w_ns; act = w_act
	}
}

/* The grant CAS with the monitor in the same atomic step. */
inline cas_grant(ninf, ncnt, ntl, nns)
{
	d_step {
		if
		:: w_inf == inf && w_cnt == cnt && w_tail == tl && w_ns == ns &&
		   w_act == act ->
			w_inf = ninf; w_cnt = ncnt; w_tail = ntl; w_ns = nns;
			w_act = 1; ok = 1;
			check_account();
			gcount[now]++;
			/* Every window [mj, mj + C) that holds now. */
			mj = (now + 1 > C -> now + 1 - C : 0);
			do
			:: mj <= now ->
				mk = mj;
				mn = 0;
				do
				:: mk < mj + C && mk <= TMAX ->
					mn = mn + gcount[mk];
					mk++
				:: else -> break
				od;
				assert(mn <= L);
				mj++
			:: else -> break
			od;
			mj = 0; mk = 0; mn = 0
		:: else -> ok = 0
		fi;
		inf = w_inf; cnt = w_cnt; tl = w_tail; ns = w_ns; act = w_act
	}
}

/* slot_raise: monotone max of the count, only for the same serial. */
inline slot_raise(ser, c)
{
	d_step {
		if
		:: r_ser[(ser) % NB] == ser && r_cnt[(ser) % NB] < c ->
			r_cnt[(ser) % NB] = c
		:: else
		fi
	}
}

/*
 * Where the library returns SHMT_ECORRUPT because a ring slot does not hold
 * the serial the caller's copy of W names.  A newer serial only means that
 * the copy is stale (the ring wrapped since it was read): the caller reloads
 * W instead (OLD_STALE: it reported corruption).  With ACCOUNT, reaching the error from a state
 * that an interleaving produces is itself a failure.
 */
inline corrupt(expect)
{
#ifndef OLD_STALE
	if
	:: ss > expect -> goto reload
	:: else
	fi;
#endif
#ifdef ACCOUNT
	assert(false);
#endif
	goto done
}

/* A sealed bucket with no use in it: only the skip of a serial makes one
 * (OLD_SKIP: the skip did not count the serial, and lost the oldest). */
#ifndef OLD_SKIP
#define EMPTY_SEALED_BAD false
#define SKIP_SEALED 1
#else
#define EMPTY_SEALED_BAD (sn == 0)
#define SKIP_SEALED 0
#endif

#ifdef BROKEN
#define RETRY goto retry_w
#else
#define RETRY goto retry_clk
#endif

proctype caller(byte ncalls)
{
	byte inf, cnt, ns, now, calls, sc, sn;
	short tl, ss, tl2, ns2;
	bit act, ok;

next_call:
	if
	:: calls < ncalls -> calls++
	:: else -> goto dead
	fi;
#ifdef BROKEN
retry_w:
reload:
	now = clock;
	STOP;
	read_w();
	STOP;
#else
	/* bk_take: load W, then, in the loop, read the clock. */
reload:
	read_w();
	STOP;
retry_clk:
	now = clock;
	STOP;
#endif
	/* bk_release_step */
	if
	:: ns > 0 ->
		d_step { sc = r_close[(tl - ns) % NB]; ss = r_ser[(tl - ns) % NB];
			 sn = r_cnt[(tl - ns) % NB] }
		STOP;
		if
		:: ss != tl - ns || sn > inf || EMPTY_SEALED_BAD ->
			corrupt(tl - ns)
		:: else
		fi;
		if
		:: sc + C <= now ->
			cas_w(inf - sn, cnt, tl, ns - 1, act);
			STOP;
			RETRY
		:: else
		fi
	:: ns == 0 && act ->
		d_step { sc = r_close[tl % NB]; ss = r_ser[tl % NB] }
		STOP;
		if
		:: ss != tl -> corrupt(tl)
		:: else
		fi;
		if
		:: sc + C <= now ->
			slot_raise(tl, cnt);
			STOP;
			cas_w(inf - cnt, 0, tl + 1, 0, 0);
			STOP;
			RETRY
		:: else
		fi
	:: else
	fi;
	/* exhausted */
	if
	:: inf >= L -> goto done
	:: else
	fi;
	tl2 = tl;
	ns2 = ns;
	if
	:: act ->
		d_step { sc = r_close[tl % NB]; ss = r_ser[tl % NB] }
		STOP;
		if
		:: ss != tl -> corrupt(tl)
		:: else
		fi;
		if
		:: cnt < B && now < sc ->
			cas_grant(inf + 1, cnt + 1, tl, ns);
			STOP;
			if
			:: ok -> goto done
			:: else -> RETRY
			fi
		:: else
		fi;
		slot_raise(tl, cnt);
		STOP;
		tl2 = tl + 1;
		ns2 = ns + 1
	:: else
	fi;
	/* ring full: a denial */
	if
	:: ns2 + 1 > NB -> goto done
	:: else
	fi;
	/* slot_open: first opener wins; sc = the serial's close, or 0 when the
	 * slot holds a newer serial. */
	d_step {
		if
		:: r_ser[tl2 % NB] < tl2 ->
			r_close[tl2 % NB] = now + S; r_ser[tl2 % NB] = tl2;
			r_cnt[tl2 % NB] = 0; sc = now + S
		:: r_ser[tl2 % NB] == tl2 -> sc = r_close[tl2 % NB]
		:: else -> sc = 0
		fi
	}
	STOP;
	if
	:: sc <= now ->
		/* A stale opener set this serial's close in the past: skip it.
		 * An earlier version (OLD_SKIP) kept nsealed2 here, which dropped
		 * the oldest sealed bucket from W's range; the skip counts the skipped serial as
		 * a sealed, empty bucket instead. */
		cas_w(inf, 0, tl2 + 1, ns2 + SKIP_SEALED, 0);
		STOP;
		RETRY
	:: else
	fi;
	cas_grant(inf + 1, 1, tl2, ns2);
	STOP;
	if
	:: ok -> goto done
	:: else -> RETRY
	fi;
done:
	skip;
	d_step { inf = 0; cnt = 0; ns = 0; now = 0; sc = 0; sn = 0; tl = 0;
		 ss = 0; tl2 = 0; ns2 = 0; act = 0; ok = 0 }
	goto next_call;
dead:
	skip;
	d_step { inf = 0; cnt = 0; ns = 0; now = 0; sc = 0; sn = 0; tl = 0;
		 ss = 0; tl2 = 0; ns2 = 0; act = 0; ok = 0; calls = 0 }
}

/* bk_housekeep as shmt_housekeep runs it: the clock is read once, before W
 * is loaded, then due buckets are released and a closed active bucket is
 * sealed. */
proctype daemon()
{
	byte inf, cnt, ns, now, passes, sc, sn;
	short tl, ss;
	bit act, ok;

	do
	:: passes < DPASSES ->
		passes++;
		now = clock;
		STOP;
reload:
		read_w();
		STOP;
hk:
		if
		:: ns > 0 ->
			d_step { sc = r_close[(tl - ns) % NB];
				 ss = r_ser[(tl - ns) % NB];
				 sn = r_cnt[(tl - ns) % NB] }
			STOP;
			if
			:: ss != tl - ns || sn > inf || EMPTY_SEALED_BAD ->
			corrupt(tl - ns)
			:: else
			fi;
			if
			:: sc + C <= now ->
				cas_w(inf - sn, cnt, tl, ns - 1, act);
				STOP;
				goto hk
			:: else
			fi
		:: ns == 0 && act ->
			d_step { sc = r_close[tl % NB]; ss = r_ser[tl % NB] }
			STOP;
			if
			:: ss != tl -> corrupt(tl)
			:: else
			fi;
			if
			:: sc + C <= now ->
				slot_raise(tl, cnt);
				STOP;
				cas_w(inf - cnt, 0, tl + 1, 0, 0);
				STOP;
				goto hk
			:: else
			fi
		:: else
		fi;
		if
		:: act ->
			d_step { sc = r_close[tl % NB]; ss = r_ser[tl % NB] }
			STOP;
			if
			:: ss != tl -> corrupt(tl)
			:: else
			fi;
			if
			:: now < sc && cnt < B -> skip
			:: else ->
				slot_raise(tl, cnt);
				STOP;
				cas_w(inf, 0, tl + 1, ns + 1, 0);
				STOP;
				goto hk
			fi
		:: else
		fi;
done:
		skip;
		d_step { inf = 0; cnt = 0; ns = 0; now = 0; sc = 0; sn = 0;
			 tl = 0; ss = 0; act = 0; ok = 0 }
	:: else -> break
	od;
dead:
	skip
}

proctype ticker()
{
	do
	:: clock < TMAX -> clock++
	:: else -> break
	od
}

init {
	atomic {
		mj = 0;
		do
		:: mj < NB -> r_ser[mj] = mj - NB; mj++
		:: else -> break
		od;
		mj = 0;
		run ticker();
		run caller(CALLS0);
		run caller(CALLS);
#if NCALLERS > 2
		run caller(CALLS);
#endif
#if DAEMON
		run daemon();
#endif
	}
}
