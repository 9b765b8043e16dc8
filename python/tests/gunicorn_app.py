# SPDX-License-Identifier: MIT
"""The app test_gunicorn.py serves: opened at import, so with --preload the
segment is opened once in gunicorn's master and every worker inherits the
handle across fork()."""
import os

import shmthrottle
from shmthrottle.wsgi import RateLimit

segment = shmthrottle.Segment(os.environ["SHMTHROTTLE_SEGMENT"])


def hello(environ, start_response):
    body = b"hello\n"
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body))),
                              ("X-Worker", str(os.getpid()))])
    return [body]


def client(environ):
    if environ.get("PATH_INFO") == "/health":
        return None                            # never limited
    return environ.get("HTTP_X_CLIENT") or environ.get("REMOTE_ADDR")


app = RateLimit(hello, "per-client", segment=segment, key=client)
