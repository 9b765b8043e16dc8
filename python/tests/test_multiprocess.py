# SPDX-License-Identifier: MIT
"""Eight processes of multiprocessing, in fork mode (the handle opened in
the parent and inherited) and in spawn mode (each opens its own), share one
limiter with a short real window.  Each records, for every grant, the
CLOCK_MONOTONIC times just before and just after its call; the check is the
one of the C tests: no window [t, t + W) certainly holds more grants than
the limit (a grant certainly lies in it when its call started at or after t
and ended before t + W).  The verdict does not depend on scheduling: a slow
machine only makes fewer windows certain."""
import multiprocessing as mp
import os
import time

import pytest

import shmthrottle

PROCS = 8
RUN_NS = int(200_000_000 * float(os.environ.get("SHMT_STRESS_SCALE", "1")))

CONF = """
[limiter mp-exact]
mode = exact
limit = 20
window = 20ms
[limiter mp-buckets]
limit = 40
window = 20ms
slack_time = 2ms
slack_uses = 4
"""
WINDOW_NS = 20_000_000
LIMITS = {"mp-exact": 20, "mp-buckets": 40}

_inherited = None


def _worker(args):
    name, limiter, start_at = args
    seg = _inherited if _inherited is not None else shmthrottle.Segment(name)
    while time.monotonic_ns() < start_at:     # start together (bounded)
        pass
    grants = []
    calls = 0
    # A worker that starts late (spawn under load) still runs its share.
    end = max(start_at, time.monotonic_ns()) + RUN_NS
    while time.monotonic_ns() < end:
        calls += 1
        t0 = time.monotonic_ns()
        ok = seg.try_use(limiter)
        t1 = time.monotonic_ns()
        if ok:
            grants.append((t0, t1))
    slots = seg.stat()["slots"]["in_use"]
    return os.getpid(), grants, slots, calls


def _run_worker(results, args):
    results.put(_worker(args))


def _worst_window(grants):
    """The most grants that certainly lie in one window [t, t + W)."""
    grants = sorted(grants)
    worst = 0
    ends = [e for _, e in grants]
    for i, (t, _) in enumerate(grants):
        n = sum(1 for j in range(i, len(grants))
                if grants[j][0] >= t and ends[j] < t + WINDOW_NS)
        worst = max(worst, n)
    return worst


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("limiter", ["mp-exact", "mp-buckets"])
def test_processes_keep_the_limit(make_segment, method, limiter):
    global _inherited
    name = make_segment(CONF)
    ctx = mp.get_context(method)
    if method == "fork":
        _inherited = shmthrottle.Segment(name)   # opened before the fork
    try:
        start_at = time.monotonic_ns() + (300_000_000 if method == "fork"
                                          else 3_000_000_000)
        # One process per worker (a pool may hand two tasks to one process
        # when the machine is slow to start the others).
        results = ctx.Queue()
        procs = [ctx.Process(target=_run_worker,
                             args=(results, (name, limiter, start_at)))
                 for _ in range(PROCS)]
        for p in procs:
            p.start()
        res = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
    finally:
        if _inherited is not None:
            _inherited.close()
            _inherited = None
    pids = {r[0] for r in res}
    grants = [g for r in res for g in r[1]]
    print("%s %s: %d processes, %d grants of %d calls" %
          (method, limiter, len(pids), len(grants), sum(r[3] for r in res)))
    assert len(pids) == PROCS
    # In fork mode every worker held a slot of its own (the inherited
    # handle reattached) besides the parent's.
    assert all(r[2] >= (2 if method == "fork" else 1) for r in res)
    assert len(grants) >= LIMITS[limiter]      # the limiter does grant
    worst = _worst_window(grants)
    print("most grants certainly in one window: %d (limit %d)" %
          (worst, LIMITS[limiter]))
    assert worst <= LIMITS[limiter]
