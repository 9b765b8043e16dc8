# SPDX-License-Identifier: MIT
"""WSGI middleware: limit requests per client with a shmthrottle limiter.

    from shmthrottle.wsgi import RateLimit
    app = RateLimit(app, "per-ip")       # key: REMOTE_ADDR

Every request takes one use of the limiter (per client when the limiter is
per client, else shared).  A refused request gets 429 Too Many Requests
with Retry-After, RateLimit-Limit, RateLimit-Remaining: 0, RateLimit-Reset
and RateLimit-Policy; a granted one passes through with RateLimit-Limit and
RateLimit-Policy added.

Retry-After and RateLimit-Reset are an upper bound: window + slack seconds
(rounded up), after which every use taken before the refusal is certainly
back.  The exact time until the next use frees up needs the decision API of
the library, which this version does not call.
"""
import math

import shmthrottle


class RateLimit:
    """RateLimit(app, limiter, segment=None, key=None, status=429)

    APP: the WSGI application.  LIMITER: the limiter's name.  SEGMENT: a
    shmthrottle.Segment, or None to open the default one (it may be opened
    before the server forks its workers).  KEY: environ -> client id (str
    or bytes), default environ["REMOTE_ADDR"]; a key of None is not
    limited."""

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
        per_client, limit, reset, policy = self._limits()
        if per_client:
            client = self.key(environ)
            granted = True if client is None else \
                self.segment.try_use(self.limiter, client)
        else:
            granted = self.segment.try_use(self.limiter)
        if not granted:
            body = b"Too Many Requests\n"
            start_response("429 Too Many Requests", [
                ("Content-Type", "text/plain"),
                ("Content-Length", str(len(body))),
                ("Retry-After", reset),
                ("RateLimit-Limit", limit),
                ("RateLimit-Remaining", "0"),
                ("RateLimit-Reset", reset),
                ("RateLimit-Policy", policy),
            ])
            return [body]

        def start(status, headers, exc_info=None):
            headers = list(headers) + [("RateLimit-Limit", limit),
                                       ("RateLimit-Policy", policy)]
            if exc_info is not None:
                return start_response(status, headers, exc_info)
            return start_response(status, headers)
        return self.app(environ, start)


def _limits(segment, limiter):
    """(per_client, limit, reset, policy) of LIMITER, as header values."""
    for row in segment.limiters():
        if row["name"] == limiter:
            break
    else:
        raise shmthrottle.Error(2, "no such limiter: " + limiter)
    window = row["window_ns"] / 1e9
    reset = max(1, math.ceil((row["window_ns"] + row["slack_ns"]) / 1e9))
    policy = "%d;w=%s" % (row["limit"], _num(window))
    return (row["clients"] is not None, str(row["limit"]), str(reset), policy)


def _remote_addr(environ):
    return environ.get("REMOTE_ADDR")


def _num(x):
    return str(int(x)) if x == int(x) else repr(x)
