# SPDX-License-Identifier: MIT
"""Every method and exception of the binding, in one process (and one
fork): limiters shared, per client and key pools; the dictionary as a
mapping (str and bytes keys, binary data, 1 MiB values); counters; hot
keys; stat and limiters against the CLI's JSON; handles after fork(); moves
followed, and the generations followed past unmapped."""
import errno
import json
import math
import os
import signal
import subprocess
import threading
import time

import pytest

import shmthrottle
from conftest import cli

LIMITERS = """
[limiter shared]
mode = exact
limit = 5
window = 1h
[limiter pc]
per_client = yes
capacity = 64
limit = 3
window = 1h
slack_time = 1s
slack_uses = 1
[limiter pool]
keys = k1, k2
uses_per_key = 2
window = 1h
slack_time = 1s
slack_uses = 1
[limiter three]
mode = exact
limit = 3
window = 1h
[limiter rate]
mode = gcra
per_client = yes
capacity = 16
limit = 3
window = 1h
burst = 3
[limiter fast]
mode = exact
limit = 2
window = 50ms
"""


@pytest.fixture
def seg(make_segment):
    s = shmthrottle.Segment(make_segment(LIMITERS))
    yield s
    s.close()


def test_version_matches_the_header():
    assert shmthrottle.version() == "%d.%d.%d" % (
        shmthrottle._native.HEADER_VERSION_NUMBER // 10000,
        shmthrottle._native.HEADER_VERSION_NUMBER // 100 % 100,
        shmthrottle._native.HEADER_VERSION_NUMBER % 100)


def test_open_by_environment_and_context_manager(make_segment, monkeypatch):
    name = make_segment()
    monkeypatch.setenv("SHMTHROTTLE_SEGMENT", name)
    with shmthrottle.Segment() as s:
        assert s.name == name
        assert not s.closed
    assert s.closed
    with pytest.raises(ValueError):
        s.try_use("shared")
    s.close()                                  # twice is fine


def test_missing_segment_is_a_segment_error():
    with pytest.raises(shmthrottle.SegmentError) as ei:
        shmthrottle.Segment("/shmt-pytest-no-such-%d" % os.getpid())
    assert isinstance(ei.value, OSError)
    assert isinstance(ei.value, shmthrottle.Error)
    assert ei.value.errno == errno.ENOENT
    assert "no such segment" in ei.value.strerror


def test_not_a_segment_is_a_segment_error():
    name = "/shmt-pytest-junk-%d" % os.getpid()
    with open("/dev/shm" + name, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(b"\x5a" * 65536)
    try:
        with pytest.raises(shmthrottle.SegmentError) as ei:
            shmthrottle.Segment(name)
        code = -ei.value.errno
        assert code in (-3101, -3102, -3103)    # magic, format or size
        assert ei.value.strerror.endswith(shmthrottle.strerror(code))
    finally:
        os.unlink("/dev/shm" + name)


def test_bad_name_is_an_error():
    with pytest.raises(shmthrottle.Error) as ei:
        shmthrottle.Segment("no-slash")
    assert ei.value.errno == errno.EINVAL


def test_slot_table_full():
    import conftest
    small = "/shmt-pytest-small-%d" % os.getpid()
    r = subprocess.run([cli(), "-s", small, "create", "--max-slots", "2",
                        "--dict", "0", "--counters", "0", "--analyzer", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    try:
        a = shmthrottle.Segment(small)
        b = shmthrottle.Segment(small)
        with pytest.raises(shmthrottle.TableFullError) as ei:
            shmthrottle.Segment(small)
        assert ei.value.errno == 3107
        assert "slot" in ei.value.strerror
        b.close()
        shmthrottle.Segment(small).close()     # a slot is free again
        a.close()
    finally:
        conftest.remove_segment(small)


def test_damaged_segment_is_a_damaged_error(make_segment):
    name = make_segment()
    # The region table lies within the header's first page; a region that
    # points outside the object makes the header inconsistent.
    with open("/dev/shm" + name, "r+b") as f:
        hdr = bytearray(f.read(4096))
        st = json.loads(subprocess.run(
            [cli(), "-s", name, "--json", "stat"], capture_output=True,
            text=True, check=True).stdout)
        size = st["size"]
        hit = False
        for r in st["regions"]:
            if r["offset"] == 0:
                continue
            needle = r["offset"].to_bytes(8, "little")
            at = hdr.find(needle)
            if at > 0:
                hdr[at:at + 8] = (size * 4).to_bytes(8, "little")
                hit = True
                break
        assert hit, "no region offset found in the header"
        f.seek(0)
        f.write(hdr)
    with pytest.raises(shmthrottle.Error) as ei:
        shmthrottle.Segment(name)
    assert type(ei.value) is shmthrottle.DamagedError
    assert ei.value.errno == 3104 and "corrupt" in ei.value.strerror


def test_try_use_shared(seg):
    assert [seg.try_use("shared") for _ in range(7)] == [True] * 5 + [False] * 2
    with pytest.raises(shmthrottle.Error) as ei:
        seg.try_use("nope")
    assert ei.value.errno == errno.ENOENT
    with pytest.raises(shmthrottle.Error) as ei:
        seg.try_use("shared", "client")        # not a per-client limiter
    assert ei.value.errno == errno.EPERM
    with pytest.raises(TypeError):
        seg.try_use(b"shared")
    with pytest.raises(TypeError):
        seg.try_use()


def test_try_use_per_client_str_and_bytes(seg):
    # "é" as str and as its UTF-8 bytes is one client.
    got = [seg.try_use("pc", "caf\u00e9"), seg.try_use("pc", b"caf\xc3\xa9"),
           seg.try_use("pc", client=bytearray(b"caf\xc3\xa9")),
           seg.try_use("pc", memoryview(b"caf\xc3\xa9"))]
    assert got == [True, True, True, False]
    assert seg.try_use("pc", b"\x00\xff") is True     # binary ids
    assert seg.try_use("pc", "other") is True
    with pytest.raises(shmthrottle.Error) as ei:
        seg.try_use("pc", b"x" * 1025)
    assert ei.value.errno == errno.E2BIG
    with pytest.raises(TypeError):
        seg.try_use("pc", 17)
    with pytest.raises(shmthrottle.Error) as ei:
        seg.try_use("pc")                      # per client needs one
    assert ei.value.errno == errno.EPERM


def test_next_key(seg):
    keys = [seg.next_key("pool") for _ in range(5)]
    assert sorted(keys[:4]) == ["k1", "k1", "k2", "k2"]
    assert keys[4] is None
    with pytest.raises(shmthrottle.Error):
        seg.next_key("shared")                 # no key pool


def test_dict_mapping(seg):
    d = seg.dict
    d["a"] = "x"
    d[b"b"] = b"\x00\x01\xff"
    assert d["a"] == b"x" and d[b"a"] == b"x"
    assert d["b"] == b"\x00\x01\xff"
    assert "a" in d and "zz" not in d
    assert d.get("zz") is None and d.get("zz", 7) == 7
    with pytest.raises(KeyError):
        d["zz"]
    assert sorted(d) == [b"a", b"b"] and len(d) == 2
    assert d.add("a", "y") is False and d["a"] == b"x"
    assert d.add("c", "y") is True
    assert d.replace("nope", "y") is False and "nope" not in d
    assert d.replace("c", "z") is True and d["c"] == b"z"
    d.set("t", "v", ttl=3600)
    assert d["t"] == b"v"
    with pytest.raises(ValueError):
        d.set("t", "v", ttl=0)
    assert d.incr("n") == 1 and d.incr("n", 41) == 42 and d["n"] == b"42"
    with pytest.raises(shmthrottle.Error) as ei:
        d.incr("a")                            # "x" is not a number
    assert ei.value.errno == errno.EINVAL
    assert d.delete("c") is True and d.delete("c") is False
    del d["b"]
    with pytest.raises(KeyError):
        del d["b"]
    with pytest.raises(TypeError):
        d[3] = b"x"


def test_dict_one_mib_values(seg):
    big = bytes((i * 7 + i // 251) & 0xFF for i in range(1 << 20))
    seg.dict["big"] = big
    assert seg.dict["big"] == big
    seg.dict["big"] = big[:1000]             # shrinks back
    assert seg.dict["big"] == big[:1000]
    with pytest.raises(shmthrottle.Error) as ei:
        seg.dict["big"] = big + b"!"
    assert ei.value.errno in (errno.EMSGSIZE, errno.E2BIG)


def test_count_and_bound(seg):
    for _ in range(5):
        seg.hit(b"n")
    assert seg.count(b"n") == 5          # no hit counted by count()
    assert seg.count("n") == 5
    assert seg.count(b"never") == 0
    assert seg.count(b"n", window=3.0) == 5
    with pytest.raises(ValueError):
        seg.count(b"n", window=0)
    with pytest.raises(ValueError):
        seg.count(b"n", window=-1.0)
    lo, hi, err = seg.count_bound(5)       # exact below k = 67 at 1%
    assert (lo, hi) == (5, 5) and err == pytest.approx(0.01)
    lo, hi, err = seg.count_bound(10000)   # within max(1, eps C)
    assert lo < 10000 < hi
    assert abs(10000 - lo) <= err * lo + 1e-9 and abs(hi - 10000) <= err * hi + 1e-9
    assert abs(10000 - (lo - 1)) > err * (lo - 1)
    assert abs((hi + 1) - 10000) > err * (hi + 1)
    with pytest.raises(OverflowError):
        seg.count_bound(-1)


def test_hit_and_top_keys(seg):
    assert [seg.hit("c") for _ in range(3)] == [1, 2, 3]
    assert seg.hit(b"c") == 4
    seg.dict["hot"] = "1"
    for _ in range(200):
        assert seg.dict["hot"] == b"1"
    seg.dict["cold"] = "1"
    seg.dict["cold"]
    top = seg.top_keys()
    assert top and isinstance(top[0], shmthrottle.TopKey)
    assert top[0].kind == "dict" and top[0].key == b"hot"
    assert top[0].key_length == 3 and top[0].truncated is False
    assert top[0].lower <= 200 <= top[0].upper
    assert all(k.key != b"cold" for k in top)
    info = seg.top_info()
    assert info["total"] >= 201
    # The bound of a listed key (README "Hot keys"): more than the
    # threshold of total_window less error_window and error_oldest.
    assert info["error_window"] <= info["error"]
    floor = (info["threshold_ppm"] * info["total_window"] / 1e6 -
             info["error_window"] - info["error_oldest"])
    assert 200 > floor


def _keys(obj, prefix=""):
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(prefix + k)
            out |= _keys(v, prefix + k + ".")
    elif isinstance(obj, list) and obj:
        out |= _keys(obj[0], prefix + "[].")
    return out


def test_destroyed_segment_is_a_stale_error(seg):
    """A segment destroyed under a live Segment answers StaleError (a
    SegmentError) on the next call, never a decision from a segment no
    new process can see; a Segment opened again on the new one works."""
    name = seg.name
    assert seg.try_use("shared") is True
    r = subprocess.run([cli(), "-s", name, "destroy"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    with pytest.raises(shmthrottle.StaleError) as ei:
        seg.try_use("shared")
    assert isinstance(ei.value, shmthrottle.SegmentError)
    assert ei.value.errno == 3111  # -SHMT_ESTALE
    with pytest.raises(shmthrottle.StaleError):
        seg.dict[b"k"] = b"v"
    r = subprocess.run([cli(), "-s", name, "create"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    with shmthrottle.Segment(name) as fresh:
        fresh.dict[b"k"] = b"v"
        assert fresh.dict[b"k"] == b"v"
    with pytest.raises(shmthrottle.StaleError):
        seg.hit(b"c")


def _cli_json(name, *args):
    r = subprocess.run([cli(), "-s", name, "--json"] + list(args),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_stat_has_the_fields_of_the_cli(seg):
    st = seg.stat()
    ref = _cli_json(seg.name, "stat")
    assert _keys(st) - {"daemon.housekeeping_runs"} <= _keys(ref)
    missing = _keys(ref) - _keys(st)
    # The CLI derives these from others at print time.
    assert missing <= {"daemon.state", "daemon.heartbeat_age_ns"}, missing
    assert st["segment"] == seg.name and st["size"] == ref["size"]
    assert st["format"] == ref["format"] and st["mode"] == ref["mode"]
    assert st["slots"]["in_use"] >= 1
    assert st["dictionary"]["shards"] == 4
    assert [r["name"] for r in st["regions"]] == \
        [r["name"] for r in ref["regions"]]
    # The counters' k from the formula here, from the library's bound in
    # the CLI: the two must agree.
    assert st["counters"]["error"] == ref["counters"]["error"] == 0.01
    assert st["counters"]["exact_up_to"] == \
        ref["counters"]["exact_up_to"] == 67


def test_limiters_have_the_fields_of_the_cli(seg):
    seg.try_use("shared")
    rows = seg.limiters()
    ref = _cli_json(seg.name, "limiters")["limiters"]
    assert [r["name"] for r in rows] == [r["name"] for r in ref]
    for mine, theirs in zip(rows, ref):
        assert _keys(mine) == _keys(theirs)
        for k in ("mode", "limit", "window_ns", "grants", "keys", "clients"):
            assert mine[k] == theirs[k], k


def test_limited_decorator(seg):
    calls = []

    @seg.limited("fast")
    def once(x):
        calls.append(x)
        return x * 2

    assert once(1) == 2 and once(2) == 4
    with pytest.raises(shmthrottle.Throttled):
        once(3)
    assert calls == [1, 2]

    @seg.limited("fast", wait=True, timeout=10)
    def waits(x):
        calls.append(x)
        return x

    # Waits until the 50 ms window frees a use (bounded by the timeout).
    assert waits(4) == 4 and calls == [1, 2, 4]

    @seg.limited("shared", wait=True, timeout=0.05)
    def never():
        pass
    for _ in range(5):
        seg.try_use("shared")
    with pytest.raises(shmthrottle.Throttled):
        never()


def test_threads_share_a_handle(seg):
    got = []

    def run():
        got.extend(seg.try_use("pc", "t") for _ in range(50))
    ts = [threading.Thread(target=run) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got.count(True) == 3


def test_handle_used_after_fork(seg):
    before = seg.stat()["slots"]["in_use"]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ok = seg.try_use("shared")
            n = seg.stat()["slots"]["in_use"]
            os.write(w, ("%d %d" % (ok, n)).encode())
            seg.close()
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    msg = os.read(r, 100).decode()
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    ok, n = map(int, msg.split())
    assert ok == 1
    assert n == before + 1                      # the child's own slot
    assert seg.stat()["slots"]["in_use"] == before   # released by its close
    assert seg.limiters()[0]["grants"] == 1


def _asgi_call(app, host, path="/"):
    import asyncio
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(msg):
        sent.append(msg)
    scope = {"type": "http", "path": path, "client": (host, 1234),
             "headers": []}
    asyncio.run(app(scope, receive, send))
    start = sent[0]
    return start["status"], {k.decode(): v.decode()
                             for k, v in start["headers"]}, sent[1]["body"]


def _check_refused(h, name, limit, window_s):
    """The fields of a 429 of limiter NAME: Retry-After a whole number of
    seconds >= 1, the RateLimit fields of the same decision."""
    retry = int(h["retry-after"])
    assert 1 <= retry <= window_s + 1
    assert h["ratelimit-policy"] == '"%s";q=%d;w=%d' % (name, limit, window_s)
    pname, r, t = h["ratelimit"].split(";")
    assert pname == '"%s"' % name and r == "r=0"
    assert retry <= int(t[2:]) <= window_s + 1


def test_asgi_middleware(seg):
    from shmthrottle.asgi import RateLimit

    async def inner(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})
    app = RateLimit(inner, "pc", segment=seg)
    got = [_asgi_call(app, "10.0.0.1") for _ in range(4)]
    assert [g[0] for g in got] == [200, 200, 200, 429]
    assert got[0][2] == b"ok"
    assert [g[1]["ratelimit"].split(";")[1] for g in got[:3]] == \
        ["r=2", "r=1", "r=0"]
    assert got[0][1]["ratelimit-policy"] == '"pc";q=3;w=3600'
    assert "retry-after" not in got[0][1]
    _check_refused(got[3][1], "pc", 3, 3600)
    assert _asgi_call(app, "10.0.0.2")[0] == 200                # another client


def test_wsgi_middleware_answers_from_one_decision(seg):
    from shmthrottle.wsgi import RateLimit

    def inner(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]
    app = RateLimit(inner, "three", segment=seg)
    got = []
    for _ in range(4):
        seen = {}

        def start(status, headers, exc_info=None):
            seen["status"] = int(status.split()[0])
            seen["headers"] = {k.lower(): v for k, v in headers}
        body = b"".join(app({"REMOTE_ADDR": "10.0.0.9"}, start))
        got.append((seen["status"], seen["headers"], body))
    assert [g[0] for g in got] == [200, 200, 200, 429]
    assert [g[1]["ratelimit"] for g in got[:3]] == [
        '"three";r=2;t=3600', '"three";r=1;t=3600', '"three";r=0;t=3600']
    _check_refused(got[3][1], "three", 3, 3600)
    # The exact wait: the first use comes back an hour after it was taken,
    # not window + slack.
    d = seg.peek("three")
    assert int(got[3][1]["retry-after"]) == math.ceil(d.retry_after) or \
        int(got[3][1]["retry-after"]) == math.ceil(d.retry_after) + 1


def test_acquire_counts_down_exactly(seg):
    got = [seg.acquire("three") for _ in range(4)]
    assert [bool(d) for d in got] == [True, True, True, False]
    assert [d.granted for d in got] == [True, True, True, False]
    assert [d.remaining for d in got] == [2, 1, 0, 0]
    assert all(d.limit == 3 for d in got)
    assert [d.retry_after for d in got[:3]] == [0.0, 0.0, 0.0]
    # Refused: the first use comes back one window after it was taken.
    assert 3500 < got[3].retry_after <= 3600
    assert got[3].retry_after <= got[3].reset_after <= 3600
    assert isinstance(got[3].retry_after, float)
    assert "granted=False" in repr(got[3])


def test_acquire_cost_and_clients(seg):
    d = seg.acquire("rate", client="a", cost=2)
    assert d.granted and d.remaining == 1
    d = seg.acquire("rate", b"a", 2)               # positional, bytes: same
    assert not d.granted and d.remaining == 1 and d.retry_after > 0
    assert seg.acquire("rate", client="b").remaining == 2
    with pytest.raises(shmthrottle.Error) as e:
        seg.acquire("three", cost=0)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(shmthrottle.Error) as e:
        seg.acquire("nope")
    assert e.value.errno == errno.ENOENT
    with pytest.raises(shmthrottle.Error) as e:
        seg.acquire("pc")                          # per client needs one
    assert e.value.errno == errno.EPERM
    with pytest.raises(OverflowError):
        seg.acquire("three", cost=-1)
    with pytest.raises(TypeError):
        seg.acquire(b"three")


def test_peek_changes_nothing(seg):
    a, b = seg.peek("three"), seg.peek("three")
    assert a.granted and b.granted
    assert (a.limit, a.remaining, a.retry_after, a.reset_after) == \
        (b.limit, b.remaining, b.retry_after, b.reset_after)
    assert a.remaining == 2                        # what acquire would leave
    d = seg.acquire("three")
    assert d.granted and d.remaining == 2
    for _ in range(2):
        seg.acquire("three")
    p, q = seg.peek("three"), seg.peek("three")
    assert not p.granted and not q.granted and p.remaining == q.remaining == 0
    assert 0 < q.retry_after <= p.retry_after
    assert seg.peek("rate", client="z", cost=3).granted
    assert seg.peek("rate", client="z", cost=3).granted
    assert seg.acquire("rate", client="z", cost=3).granted


def test_wait_timeouts(seg):
    for _ in range(3):
        seg.acquire("three")
    t0 = time.monotonic()
    d = seg.wait("three", timeout=0)               # one try
    assert not d and d.retry_after > 3500
    assert time.monotonic() - t0 < 5.0
    t0 = time.monotonic()
    d = seg.wait("three", timeout=0.05)
    took = time.monotonic() - t0
    assert not d.granted
    assert 0.049 <= took < 10.0, took
    with pytest.raises(ValueError):
        seg.wait("three", timeout=-1)
    # Granted once the 50 ms window frees a use (None: no limit).
    seg.acquire("fast")
    seg.acquire("fast")
    d = seg.wait("fast")
    assert d.granted and d.retry_after == 0.0


def test_wait_releases_the_gil(seg):
    for _ in range(3):
        seg.acquire("three")
    start = threading.Event()
    stop = threading.Event()
    box = {}

    def busy():
        lo, hi = box["t0"] + 0.02, box["t0"] + 0.18
        inside = 0
        while not stop.is_set():
            t = time.monotonic()
            if lo < t < hi:
                inside += 1
        box["inside"] = inside

    def waiter():
        box["t0"] = time.monotonic()
        start.set()
        box["d"] = seg.wait("three", timeout=0.2)
        box["t1"] = time.monotonic()
        stop.set()
    w = threading.Thread(target=waiter)
    w.start()
    start.wait()
    b = threading.Thread(target=busy)
    b.start()
    w.join()
    b.join()
    assert not box["d"].granted and box["t1"] - box["t0"] >= 0.199
    # Every iteration counted ran while wait was inside the library: had
    # it kept the GIL, there would be none.
    assert box["inside"] > 0


def test_wait_signals_follow_pep_475(seg):
    for _ in range(3):
        seg.acquire("three")

    class Boom(Exception):
        pass
    calls = []

    def quiet(signum, frame):
        calls.append(signum)

    def loud(signum, frame):
        raise Boom()
    old = signal.signal(signal.SIGALRM, quiet)
    try:
        # A handler that returns: the wait goes on to its timeout.
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        t0 = time.monotonic()
        d = seg.wait("three", timeout=0.3)
        took = time.monotonic() - t0
        assert calls == [signal.SIGALRM]
        assert not d.granted and 0.299 <= took < 10.0, took
        # A handler that raises: the wait ends with its exception.
        signal.signal(signal.SIGALRM, loud)
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        t0 = time.monotonic()
        with pytest.raises(Boom):
            seg.wait("three", timeout=30)
        assert time.monotonic() - t0 < 10.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_close_during_wait_waits_for_it(seg):
    for _ in range(3):
        seg.acquire("three")
    box = {}
    t = threading.Thread(target=lambda: box.setdefault(
        "d", seg.wait("three", timeout=0.2)))
    t.start()
    time.sleep(0.05)
    seg.close()
    assert seg.closed
    t.join()
    assert not box["d"].granted
    with pytest.raises(ValueError):
        seg.acquire("three")


def _generations_mapped(name):
    """Objects named /dev/shmNAME (or NAME (deleted)) mapped in this
    process, told apart by inode."""
    inos = set()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == "/dev/shm" + name:
                inos.add(fields[4])
    return len(inos)


def test_moves_unmap_the_generations_followed(make_segment):
    """A handle follows the moves the CLI makes (resize), and the
    generations it followed past are unmapped once no call is inside them
    (lib/rcu.c): at the end two are mapped, the one the handle opened and
    the live one, not one per move.  The unmap is done by the library's
    worker thread: looked for up to 10 s."""
    name = make_segment(LIMITERS)
    s = shmthrottle.Segment(name)
    d = shmthrottle.Dict(s)
    d["k"] = b"v"
    assert _generations_mapped(name) == 1
    for i in range(6):
        r = subprocess.run([cli(), "-s", name, "resize",
                            "dict=%dM" % (32 if i % 2 else 24)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert d["k"] == b"v"
        assert s.try_use("three") == (i < 3)
    deadline = time.monotonic() + 10
    while _generations_mapped(name) > 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _generations_mapped(name) == 2
    s.close()
    assert _generations_mapped(name) == 0


def _lockhold(name, which):
    """A live process that holds every shard lock of NAME's dictionary or
    counters (tests/py_lockhold.c), started and holding them."""
    path = os.environ.get("SHMT_LOCKHOLD")
    if not path:
        pytest.fail("SHMT_LOCKHOLD is not set: run these tests with ctest")
    p = subprocess.Popen([path, name, which], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"locked\n"
    return p


@pytest.mark.parametrize("which,call,want", [
    ("dict", lambda s: s.dict.set("k", b"v"), None),
    ("dict", lambda s: s.dict.add("new", b"v"), True),
    ("dict", lambda s: s.dict.delete("k0"), True),
    ("dict", lambda s: s.dict.incr("n"), 1),
    ("counters", lambda s: s.hit("h"), 1),
])
def test_a_call_waiting_for_a_lock_lets_threads_run(make_segment, which,
                                                     call, want):
    """A write that waits for a shard lock held by another (live, running)
    process must let other threads run meanwhile.  The other process
    releases the lock only when this thread tells it to, after it saw the
    writer sleep on the lock: had the writer kept the GIL, this thread
    could not tell it before the writer gave up (LockedError, after the
    running owner's 1 s), so the verdict needs no timing.  close() meanwhile
    is put off until the call returns."""
    name = make_segment(LIMITERS)
    s = shmthrottle.Segment(name)
    s.dict["k0"] = b"old"
    holder = _lockhold(name, which)
    box = {}

    def writer():
        try:
            box["rc"] = call(s)
        except Exception as e:          # noqa: BLE001 -- reported below
            box["exc"] = e
    t = threading.Thread(target=writer)
    try:
        t.start()
        assert holder.stdout.readline() == b"waiting\n"
        s.close()                       # the writer still uses the handle
        holder.stdin.write(b"go\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == b"released\n"
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
        t.join(timeout=30)
    assert "exc" not in box, box["exc"]
    assert box["rc"] == want
    assert s.closed
    with pytest.raises(ValueError):
        s.dict.set("k", b"v")
    s = shmthrottle.Segment(name)
    if which == "dict" and want is None:
        assert s.dict["k"] == b"v"
    s.close()


class _GrantAsleep:
    """A thread that calls CALL(S) while HOLDER (py_lockhold in freeze
    mode) holds the segment frozen.  Entered once the grant sleeps in the
    move's wait, as S._busy shows: only a grant that let the GIL go can
    show it to this thread (had it kept the GIL, this thread could not run
    until the grant gave up: an Error, EAGAIN, after 5 s, and _busy 0
    again).  thaw() has the holder thaw the segment; the exit waits for
    the holder and the thread.  What the call returned or raised is in
    box, with the time it returned."""

    def __init__(self, s, holder, call):
        self.s, self.holder, self.call = s, holder, call
        self.box = {}
        self.told = None
        self.thread = threading.Thread(target=self._grant)

    def _grant(self):
        try:
            self.box["rc"] = self.call(self.s)
        except Exception as e:          # noqa: BLE001 -- reported by tests
            self.box["exc"] = e
        self.box["done"] = time.monotonic()

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        while self.s._busy == 0 and "done" not in self.box:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert "done" not in self.box, self.box  # returned, never let go
        return self

    def thaw(self):
        self.told = time.monotonic()
        self.holder.stdin.write(b"go\n")
        self.holder.stdin.flush()
        assert self.holder.stdout.readline() == b"released\n"

    def __exit__(self, *exc):
        self.holder.stdin.close()
        self.holder.wait(timeout=30)
        self.thread.join(timeout=30)
        return False


@pytest.mark.parametrize("call,shared_left", [
    (lambda s: s.try_use("shared"), 4),
    (lambda s: s.try_use("pc", "alice"), 5),
    (lambda s: s.acquire("shared").granted, 4),
    (lambda s: s.next_key("pool") is not None, 5),
], ids=["try_use", "try_use_client", "acquire", "next_key"])
def test_a_grant_waiting_for_a_move_lets_threads_run(make_segment, call,
                                                     shared_left):
    """A grant that lands while a move holds the segment frozen waits for
    the move's outcome, and must let other threads run meanwhile: the
    binding keeps the GIL on a grant, and gives it up only for the sleeps
    of such a wait (the library's sleep hooks), counting itself in the
    segment's _busy while it sleeps (_GrantAsleep).  This thread then
    closes the segment and has the holder (a live "mover") thaw it.
    close() meanwhile is put off until the grant returns."""
    name = make_segment(LIMITERS)
    s = shmthrottle.Segment(name)
    with _GrantAsleep(s, _lockhold(name, "freeze"), call) as g:
        s.close()                       # the granter still uses the handle
        g.thaw()
    assert "exc" not in g.box, g.box["exc"]
    assert g.box["rc"] is True
    assert g.box["done"] > g.told       # it was waiting when told
    assert s.closed
    # The grant stood, once: "shared" (exact, limit 5) has 4 uses left
    # after a grant on it, 5 after one elsewhere.
    s = shmthrottle.Segment(name)
    assert [s.try_use("shared") for _ in range(6)].count(True) == shared_left
    s.close()


def test_a_forked_child_does_not_wait_for_the_parents_sleepers(
        make_segment):
    """A thread asleep in a grant (the segment frozen by a live "mover")
    counts in the segment's _busy, which puts close() off; a child forked
    meanwhile has no such thread, so its close() takes effect and the
    Segment may be opened again there (before, the parent's count stayed
    in the child for good: re-init raised RuntimeError)."""
    name = make_segment(LIMITERS)
    other = make_segment(LIMITERS)
    s = shmthrottle.Segment(name)
    with _GrantAsleep(s, _lockhold(name, "freeze"),
                      lambda s: s.try_use("shared")) as g:
        assert s._busy == 1
        pid = os.fork()
        if pid == 0:                    # the child: one thread
            code = 1
            try:
                if s._busy == 0:
                    s.close()
                    s.__init__(other)
                    code = 0 if s.try_use("shared") else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert s._busy == 1             # the parent's sleeper still counts
        g.thaw()
    assert "exc" not in g.box, g.box["exc"]
    assert g.box["rc"] is True
    assert s._busy == 0
    s.close()


def test_ttl_none_is_the_default_ttl_and_huge_ttls_overflow(seg):
    with pytest.raises(OverflowError):
        seg.dict.set("k", b"v", ttl=2 ** 64 / 1000 + 0.002)
    with pytest.raises(OverflowError):
        seg.dict.set("k", b"v", ttl=1e300)
    with pytest.raises(OverflowError):
        seg.dict.add("k", b"v", ttl=float("inf"))
    # Just above the longest TTL a write takes: refused, not wrapped.
    with pytest.raises(OverflowError):
        seg.dict.replace("k", b"v", ttl=(2 ** 64 // 2000000 + 10) / 1000)
    assert "k" not in seg.dict
    seg.dict.set("k", b"v", ttl=shmthrottle.Dict.TTL_MAX)
    assert seg.dict["k"] == b"v"
    with pytest.raises(ValueError):
        seg.dict.set("k", b"v", ttl=0)


TIERS = """
[limiter tiers]
per_client = yes
capacity = 16
limit = 3
window = 1h
slack_time = 1s
slack_uses = 1
overrides = 4
override = vip allow
override = bot deny
"""


def test_rule_decisions_answer_none_for_no_limit_and_no_wait(make_segment):
    s = shmthrottle.Segment(make_segment(TIERS))
    d = s.acquire("tiers", "vip")
    assert d.granted and d.limit == 0 and d.remaining is None
    assert d.retry_after == 0.0
    d = s.acquire("tiers", "bot")
    assert not d.granted and d.limit == 0 and d.retry_after is None
    assert "retry_after=None" in repr(d)
    assert s.peek("tiers", "bot").retry_after is None
    d = s.acquire("tiers", "plain")
    assert (d.limit, d.remaining, d.retry_after) == (3, 2, 0.0)
    s.close()


def _wsgi_call(app, addr):
    seen = {}

    def start(status, headers, exc_info=None):
        seen["status"] = int(status.split()[0])
        seen["headers"] = {k.lower(): v for k, v in headers}
    body = b"".join(app({"REMOTE_ADDR": addr}, start))
    return seen["status"], seen["headers"], body


def _ok_wsgi(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def test_middleware_rules_get_no_quota_fields(make_segment):
    """An allow-listed client is under no quota: no RateLimit fields (not
    q=0 and r=2**64-1); a denied one gets 429 with neither them nor a
    Retry-After (no wait helps), not 18446744074 s."""
    from shmthrottle.asgi import RateLimit as AsgiRateLimit
    from shmthrottle.wsgi import RateLimit

    s = shmthrottle.Segment(make_segment(TIERS))
    app = RateLimit(_ok_wsgi, "tiers", segment=s)
    for _ in range(5):
        status, h, body = _wsgi_call(app, "vip")
        assert (status, body) == (200, b"ok")
        assert "ratelimit" not in h and "ratelimit-policy" not in h
    status, h, _ = _wsgi_call(app, "bot")
    assert status == 429
    assert not {"ratelimit", "ratelimit-policy", "retry-after"} & set(h)
    status, h, _ = _wsgi_call(app, "plain")
    assert status == 200 and h["ratelimit-policy"] == '"tiers";q=3;w=3600'

    async def inner(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
    aapp = AsgiRateLimit(inner, "tiers", segment=s)
    status, h, _ = _asgi_call(aapp, "vip")
    assert status == 200 and "ratelimit" not in h
    status, h, _ = _asgi_call(aapp, "bot")
    assert status == 429 and "retry-after" not in h and "ratelimit" not in h
    s.close()


def _limiter_set(name, *kv):
    r = subprocess.run([cli(), "-s", name, "limiter", "set", "three"] +
                       list(kv), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_middleware_follows_a_live_change(make_segment, monkeypatch):
    """The policy's window is read again when a decision reports a limit
    not seen before (at once), and every REFRESH seconds (here 0, so the
    next request: no sleeping)."""
    import shmthrottle.wsgi as wsgi

    name = make_segment(LIMITERS)
    s = shmthrottle.Segment(name)
    app = wsgi.RateLimit(_ok_wsgi, "three", segment=s)
    monkeypatch.setattr(wsgi, "REFRESH", 1e9, raising=False)  # the limit path
    assert _wsgi_call(app, "a")[1]["ratelimit-policy"] == '"three";q=3;w=3600'
    _limiter_set(name, "limit=2", "window=2h")
    assert _wsgi_call(app, "a")[1]["ratelimit-policy"] == '"three";q=2;w=7200'
    _limiter_set(name, "window=30m")               # the limit stays 2
    assert _wsgi_call(app, "a")[1]["ratelimit-policy"] == '"three";q=2;w=7200'
    monkeypatch.setattr(wsgi, "REFRESH", 0.0, raising=False)
    status, h, _ = _wsgi_call(app, "a")
    assert h["ratelimit-policy"] == '"three";q=2;w=1800'
    s.close()
