# SPDX-License-Identifier: MIT
"""WSGI middleware: limit requests per client with a shmthrottle limiter.

    from shmthrottle.wsgi import RateLimit
    app = RateLimit(app, "per-ip")       # key: REMOTE_ADDR

Every request takes one use of the limiter (per client when the limiter is
per client, else shared) with one Segment.acquire, and gets the fields of
draft-ietf-httpapi-ratelimit-headers-09 from that decision:

    RateLimit-Policy: "per-ip";q=100;w=60      (limit, window in seconds)
    RateLimit: "per-ip";r=42;t=17              (remaining, reset in seconds)

A refused request gets 429 Too Many Requests with those and Retry-After:
the decision's retry_after in whole seconds, rounded up (at least 1), so a
client that waits that long is granted if nobody else took the use.  The
reset t is reset_after rounded up.

A client's own rule (shmthrottle client set, or override = in the config)
decides with limit 0: a client with an allow rule is under no quota, so
its responses carry no RateLimit fields; a client with a deny rule gets
429 without them and without Retry-After, since no wait would help.

The policy's window (w) is read from the segment, and read again when a
decision reports a limit not seen since the last read (the limit changed
live, or a client's own limit) and at least every REFRESH seconds, so a
live change of the window (shmthrottle limiter set ... window=) shows
within that time.
"""
import math
import time

import shmthrottle

REFRESH = 1.0


class RateLimit:
    """RateLimit(app, limiter, segment=None, key=None)

    APP: the WSGI application.  LIMITER: the limiter's name.  SEGMENT: a
    shmthrottle.Segment, or None to open the default one (it may be opened
    before the server forks its workers).  KEY: environ -> client id (str
    or bytes), default environ["REMOTE_ADDR"]; a key of None is not
    limited (and gets no RateLimit fields)."""

    def __init__(self, app, limiter, segment=None, key=None):
        self.app = app
        self.limiter = limiter
        self.segment = segment if segment is not None else shmthrottle.Segment()
        self.key = key if key is not None else _remote_addr
        self._policy = _Policy(self.segment, limiter)

    def __call__(self, environ, start_response):
        if self._policy.per_client():
            client = self.key(environ)
            if client is None:
                return self.app(environ, start_response)
            d = self.segment.acquire(self.limiter, client)
        else:
            d = self.segment.acquire(self.limiter)
        fields = headers_for(self.limiter, self._policy.window(d), d)
        if not d.granted:
            body = b"Too Many Requests\n"
            start_response("429 Too Many Requests", [
                ("Content-Type", "text/plain"),
                ("Content-Length", str(len(body))),
            ] + fields)
            return [body]

        def start(status, headers, exc_info=None):
            headers = list(headers) + fields
            if exc_info is not None:
                return start_response(status, headers, exc_info)
            return start_response(status, headers)
        return self.app(environ, start)


def headers_for(limiter, window, d):
    """The response header fields for Decision D of LIMITER (WINDOW: its
    window in seconds, as text): RateLimit-Policy and RateLimit, and
    Retry-After when D was refused.  A list of (name, value) str pairs;
    empty when a client's allow or deny rule decided (D.limit 0)."""
    if d.limit == 0:
        return []
    name = '"%s"' % limiter.replace("\\", "\\\\").replace('"', '\\"')
    out = [("RateLimit-Policy", "%s;q=%d;w=%s" % (name, d.limit, window)),
           ("RateLimit", "%s;r=%d;t=%d" % (name, d.remaining,
                                           _ceil_s(d.reset_after)))]
    if not d.granted:
        out.insert(0, ("Retry-After", str(max(1, _ceil_s(d.retry_after)))))
    return out


def _ceil_s(seconds):
    return int(math.ceil(seconds))


class _Policy:
    """What the middleware states of LIMITER: whether it is per client, and
    its window as header text, read from SEGMENT and read again when a
    decision reports a limit not seen since the last read, or after
    REFRESH seconds."""

    __slots__ = ("_segment", "_limiter", "_per_client", "_window", "_seen",
                 "_read_at")

    def __init__(self, segment, limiter):
        self._segment = segment
        self._limiter = limiter
        self._read_at = None

    def _read(self):
        per_client, window_ns, limit = self._segment._limiter_info(
            self._limiter)
        self._per_client = per_client
        self._window = _num(window_ns / 1e9)
        self._seen = {limit}
        self._read_at = time.monotonic()

    def per_client(self):
        if self._read_at is None or \
                time.monotonic() - self._read_at >= REFRESH:
            self._read()
        return self._per_client

    def window(self, d):
        """The window for decision D's fields."""
        if d.limit != 0 and d.limit not in self._seen:
            self._read()
            # A client's own limit stays unseen in the limiter: read once.
            self._seen.add(d.limit)
        return self._window


def _remote_addr(environ):
    return environ.get("REMOTE_ADDR")


def _num(x):
    return str(int(x)) if x == int(x) else repr(x)
