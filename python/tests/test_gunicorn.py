# SPDX-License-Identifier: MIT
"""A real gunicorn (Debian's) with 4 sync workers and --preload serves
gunicorn_app behind shmthrottle.wsgi.RateLimit on a loopback socket the test
binds (handed over as fd://N).  Real HTTP requests (urllib) for 12 clients
(X-Client header): per client, exactly the limit of 200s (the limiter takes
one use per bucket, so nothing is refused early) and the rest 429 with
Retry-After and the RateLimit fields.  Halfway, one worker is killed with
kill -9 and the test waits until gunicorn has started another: the counts
do not change.  The window (120 s) is longer than the test; its exactness
check is only made when the requests fit in one window, the safety check
(never more 200s than the limit) always."""
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

LIMIT = 5
WINDOW_S = 120
CONF = """
[limiter per-client]
per_client = yes
capacity = 256
limit = %d
window = %ds
slack_time = 1s
slack_uses = 1
""" % (LIMIT, WINDOW_S)
CLIENTS = 12


def _workers(master):
    out = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        if int(fields[1]) == master and fields[0] != "Z":
            out.add(int(d))
    return out


def _wait(cond, what, limit_s=60.0):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    pytest.fail("gave up after %.0f s waiting for %s" % (limit_s, what))


def _get(port, path="/", client=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path))
    if client is not None:
        req.add_header("X-Client", client)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.fixture
def server(make_segment):
    name = make_segment(CONF)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    env = dict(os.environ, SHMTHROTTLE_SEGMENT=name,
               PYTHONPATH=os.pathsep.join(
                   [os.path.dirname(__file__), os.environ["PYTHONPATH"]]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--preload", "--workers", "4",
         "--bind", "fd://%d" % sock.fileno(), "--graceful-timeout", "2",
         "--log-level", "warning", "gunicorn_app:app"],
        pass_fds=(sock.fileno(),), env=env, cwd=os.path.dirname(__file__))
    sock.close()
    try:
        def up():
            if proc.poll() is not None:
                pytest.fail("gunicorn exited with %d" % proc.returncode)
            try:
                return _get(port, "/health")[0] == 200
            except (OSError, http.client.HTTPException):
                return False
        _wait(up, "gunicorn to answer")
        _wait(lambda: len(_workers(proc.pid)) == 4, "4 workers")
        yield proc, port, name
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


POLICY = '"per-client";q=%d;w=%d' % (LIMIT, WINDOW_S)


def _ratelimit(headers):
    """The r and t of the RateLimit field, as ints."""
    name, r, t = headers["RateLimit"].split(";")
    assert name == '"per-client"' and r[:2] == "r=" and t[:2] == "t="
    return int(r[2:]), int(t[2:])


def _check_429(headers):
    # The exact wait, in whole seconds rounded up: within window + slack.
    retry = int(headers["Retry-After"])
    assert 1 <= retry <= WINDOW_S + 1
    remaining, reset = _ratelimit(headers)
    assert remaining == 0
    assert retry <= reset <= WINDOW_S + 1
    assert headers["RateLimit-Policy"] == POLICY


def test_gunicorn_preload_limits_per_client(server):
    proc, port, _name = server
    t0 = time.monotonic()
    ok = {c: 0 for c in range(CLIENTS)}
    denied = {c: 0 for c in range(CLIENTS)}
    served_by = set()

    def burst(n):
        for c in range(CLIENTS):
            for _ in range(n):
                status, headers, body = _get(port, client="client-%d" % c)
                if status == 200:
                    assert body == b"hello\n"
                    assert headers["RateLimit-Policy"] == POLICY
                    assert "Retry-After" not in headers
                    assert _ratelimit(headers)[0] < LIMIT
                    served_by.add(int(headers["X-Worker"]))
                    ok[c] += 1
                else:
                    assert status == 429, status
                    _check_429(headers)
                    denied[c] += 1

    burst(3)                                   # 3 of 5 each: all granted
    assert all(v == 3 for v in ok.values()), ok
    before = _workers(proc.pid)
    victim = sorted(before)[0]
    os.kill(victim, signal.SIGKILL)
    _wait(lambda: (lambda w: len(w) == 4 and victim not in w)(
        _workers(proc.pid)), "gunicorn to replace the killed worker")
    burst(5)                                   # 2 more granted, 3 refused
    elapsed = time.monotonic() - t0
    print("workers served: %d; %.1f s" % (len(served_by), elapsed))
    assert all(v <= LIMIT for v in ok.values()), ok
    if elapsed < WINDOW_S:
        assert all(v == LIMIT for v in ok.values()), ok
        assert all(v == 3 for v in denied.values()), denied
