#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Per-call cost of a shared limiter from Python, side by side in one run:
the C call (a loop in C inside the extension), Segment.try_use,
Segment.acquire (which also builds a Decision), a 20-line
ctypes wrapper of the shared library, and (when redis-server is there)
redis-py running a sliding-log limiter as a Lua script over a unix socket.
Each row: the median of ROUNDS rounds of N calls, ns per call.

    PYTHONPATH=build/python python3 python/bench/bench_python.py \\
        --cli build/cli/shmthrottle --lib build/lib/libshmthrottle.so
"""
import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import shmthrottle

CONF = """
[segment]
max_slots = 16
[limiter bench]
limit = 100000000
window = 1s
slack_time = 10ms
slack_uses = 10000
"""

LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now, now .. ':' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) / 1000))
  return 1
end
return 0
"""


def ctypes_wrapper(libpath):
    # What a user writes by hand: 20 lines.
    lib = ctypes.CDLL(libpath)
    lib.shmt_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.shmt_open.restype = ctypes.c_int
    lib.shmt_try_use_key.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.shmt_try_use_key.restype = ctypes.c_int
    lib.shmt_close.argtypes = [ctypes.c_void_p]
    lib.shmt_close.restype = None

    class Seg:
        def __init__(self, name):
            self.h = ctypes.c_void_p()
            rc = lib.shmt_open(name.encode(), ctypes.byref(self.h))
            if rc != 0:
                raise OSError(-rc, "shmt_open")

        def try_use(self, limiter):
            rc = lib.shmt_try_use_key(self.h, limiter)
            if rc < 0:
                raise OSError(-rc, "shmt_try_use_key")
            return rc == 1

        def close(self):
            lib.shmt_close(self.h)
    return Seg


def per_call(fn, n, rounds):
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        fn(n)
        out.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("-n", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--redis-n", type=int, default=20000)
    a = ap.parse_args()

    name = "/shmt-pybench-%d" % os.getpid()
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(CONF)
    subprocess.run([a.cli, "-s", name, "create", "-c", f.name], check=True)
    os.unlink(f.name)
    rows = []
    try:
        seg = shmthrottle.Segment(name)
        c = statistics.median(seg._bench_c("bench", a.n)[0]
                              for _ in range(a.rounds))
        rows.append(("C shmt_try_use_key (loop in C)", c))

        def py(n, tu=seg.try_use):
            for _ in range(n):
                tu("bench")
        rows.append(("Python Segment.try_use", per_call(py, a.n, a.rounds)))

        def acq(n, ac=seg.acquire):
            for _ in range(n):
                ac("bench")
        rows.append(("Python Segment.acquire (a Decision)",
                     per_call(acq, a.n, a.rounds)))
        rows.append(("C shmt_acquire with a decision (loop in C)",
                     statistics.median(seg._bench_c("bench", a.n, True)[0]
                                       for _ in range(a.rounds))))

        cseg = ctypes_wrapper(a.lib)(name)

        def ct(n, tu=cseg.try_use):
            for _ in range(n):
                tu(b"bench")
        rows.append(("Python ctypes wrapper", per_call(ct, a.n, a.rounds)))
        cseg.close()

        def loop(n):
            for _ in range(n):
                pass
        rows.append(("(empty Python loop, per iteration)",
                     per_call(loop, a.n, a.rounds)))
        seg.close()
    finally:
        os.unlink("/dev/shm" + name)

    server = shutil.which("redis-server")
    try:
        import redis
    except ImportError:
        redis = None
    if server and redis:
        d = tempfile.mkdtemp()
        sock = os.path.join(d, "redis.sock")
        p = subprocess.Popen([server, "--port", "0", "--unixsocket", sock,
                              "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL)
        try:
            r = redis.Redis(unix_socket_path=sock)
            for _ in range(200):
                try:
                    r.ping()
                    break
                except redis.exceptions.ConnectionError:
                    time.sleep(0.05)
            script = r.register_script(LUA)
            seq = [0]

            def rd(n):
                for _ in range(n):
                    seq[0] += 1
                    script(keys=["bench"], args=[2147483647, 1000000, seq[0]])
            rows.append(("redis-py, Lua sliding log, unix socket",
                         per_call(rd, a.redis_n, a.rounds)))
        finally:
            p.terminate()
            p.wait()
            shutil.rmtree(d, ignore_errors=True)
    else:
        rows.append(("redis-py (redis-server or redis-py missing)", float("nan")))

    print("interpreter %s %s; median of %d rounds; ns per call"
          % (sys.executable, sys.version.split()[0], a.rounds))
    for label, ns in rows:
        print("%-42s %10.1f" % (label, ns))
    print("try_use - C call: %.1f ns" % (rows[1][1] - rows[0][1]))
    print("acquire - C shmt_acquire: %.1f ns" % (rows[2][1] - rows[3][1]))
    if rows[-1][1] == rows[-1][1]:
        print("redis-py / try_use: %.0f x" % (rows[-1][1] / rows[1][1]))


if __name__ == "__main__":
    main()
