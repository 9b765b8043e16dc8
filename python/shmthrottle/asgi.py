# SPDX-License-Identifier: MIT
"""ASGI middleware, the twin of shmthrottle.wsgi.RateLimit (same headers,
from one Segment.acquire per request).  Only "http" requests are limited.

    from shmthrottle.asgi import RateLimit
    app = RateLimit(app, "per-ip")       # key: the client's host
"""
import shmthrottle
from .wsgi import _Policy, headers_for


def _client_host(scope):
    c = scope.get("client")
    return c[0] if c else None


class RateLimit:
    """RateLimit(app, limiter, segment=None, key=None): KEY is scope ->
    client id (default the client's host); a key of None is not limited."""

    def __init__(self, app, limiter, segment=None, key=None):
        self.app = app
        self.limiter = limiter
        self.segment = segment if segment is not None else shmthrottle.Segment()
        self.key = key if key is not None else _client_host
        self._policy = _Policy(self.segment, limiter)

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        if self._policy.per_client():
            client = self.key(scope)
            if client is None:
                return await self.app(scope, receive, send)
            d = self.segment.acquire(self.limiter, client)
        else:
            d = self.segment.acquire(self.limiter)
        fields = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                  for k, v in headers_for(self.limiter,
                                          self._policy.window(d), d)]
        if not d.granted:
            body = b"Too Many Requests\n"
            await send({"type": "http.response.start", "status": 429,
                        "headers": [
                            (b"content-type", b"text/plain"),
                            (b"content-length", str(len(body)).encode()),
                        ] + fields})
            await send({"type": "http.response.body", "body": body})
            return None

        async def send_with_headers(msg):
            if msg.get("type") == "http.response.start":
                msg = dict(msg)
                msg["headers"] = list(msg.get("headers", [])) + fields
            await send(msg)
        return await self.app(scope, receive, send_with_headers)
