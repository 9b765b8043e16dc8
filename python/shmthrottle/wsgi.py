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
"""
import math

import shmthrottle


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
        self._info = None

    def _limits(self):
        if self._info is None:
            self._info = _limits(self.segment, self.limiter)
        return self._info

    def __call__(self, environ, start_response):
        per_client, window = self._limits()
        if per_client:
            client = self.key(environ)
            if client is None:
                return self.app(environ, start_response)
            d = self.segment.acquire(self.limiter, client)
        else:
            d = self.segment.acquire(self.limiter)
        fields = headers_for(self.limiter, window, d)
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
    Retry-After when D was refused.  A list of (name, value) str pairs."""
    name = '"%s"' % limiter.replace("\\", "\\\\").replace('"', '\\"')
    out = [("RateLimit-Policy", "%s;q=%d;w=%s" % (name, d.limit, window)),
           ("RateLimit", "%s;r=%d;t=%d" % (name, d.remaining,
                                           _ceil_s(d.reset_after)))]
    if not d.granted:
        out.insert(0, ("Retry-After", str(max(1, _ceil_s(d.retry_after)))))
    return out


def _ceil_s(seconds):
    return int(math.ceil(seconds))


def _limits(segment, limiter):
    """(per_client, window in seconds as header text) of LIMITER."""
    for row in segment.limiters():
        if row["name"] == limiter:
            break
    else:
        raise shmthrottle.Error(2, "no such limiter: " + limiter)
    return (row["clients"] is not None, _num(row["window_ns"] / 1e9))


def _remote_addr(environ):
    return environ.get("REMOTE_ADDR")


def _num(x):
    return str(int(x)) if x == int(x) else repr(x)
