# SPDX-License-Identifier: MIT
"""shmthrottle: rate limiters, a dictionary and counters in POSIX shared
memory, shared by every process of one host (see libshmthrottle).

    import shmthrottle
    with shmthrottle.Segment() as seg:        # $SHMTHROTTLE_SEGMENT or /shmthrottle
        if seg.try_use("api", client="10.0.0.1"):
            ...
        d = seg.acquire("api", client="10.0.0.1")   # a Decision
        if not d:
            print("retry in %.3f s" % d.retry_after)
        seg.dict["k"] = b"v"

A Segment opened before fork() (gunicorn --preload, multiprocessing's fork
mode) may be used in the child: its first call there takes a process slot
of the child's own.
"""
from collections import namedtuple
from collections.abc import MutableMapping
import functools

from ._native import (Segment as _Segment, Decision, Error, SegmentError, StaleError,
                      DamagedError,
                      TableFullError, LockedError, version, strerror)

__all__ = ["Segment", "Decision", "Dict", "TopKey", "Error", "SegmentError", "StaleError",
           "DamagedError", "TableFullError", "LockedError", "Throttled",
           "version", "strerror"]

TopKey = namedtuple("TopKey", "kind key key_length truncated hash lower upper share")
TopKey.__doc__ = """A hot key: KIND "dict" or "client"; KEY its bytes (the kept
prefix when TRUNCATED, None when only its HASH is known); LOWER <= true count
<= UPPER over the exact window [now - window, now]; SHARE = lower / total."""


class Throttled(Exception):
    """Raised by a function decorated with Segment.limited(wait=False) when
    the limiter refuses the call."""


def _key(k):
    if isinstance(k, str):
        return k.encode("utf-8")
    return bytes(k)


class Dict(MutableMapping):
    """The segment's dictionary as a mapping of bytes to bytes (str keys and
    values are encoded as UTF-8; values read back are bytes).

    A TTL is in seconds (whole milliseconds are kept).  None, and d[key] =
    value, give the segment's default TTL: none unless the segment was made
    with one ([dictionary] default_ttl), so by default the item never
    expires.  The library has no explicit "never" beside a default TTL: the
    longest TTL, TTL_MAX (about 292 years), is the nearest.  A TTL above
    TTL_MAX raises OverflowError."""

    __slots__ = ("_seg",)

    #: The longest TTL a write takes, in seconds (2**64 // 2000000 ms).
    TTL_MAX = (2 ** 64 // 2000000) / 1000

    def __init__(self, seg):
        self._seg = seg

    def __getitem__(self, key):
        v = self._seg._get(key)
        if v is None:
            raise KeyError(key)
        return v

    def get(self, key, default=None):
        v = self._seg._get(key)
        return default if v is None else v

    def __setitem__(self, key, value):
        self._seg._put(key, value, 0, 0)

    def set(self, key, value, ttl=None):
        """Store VALUE under KEY; TTL in seconds (None: the segment's
        default TTL, which is none, so never expires, unless the segment
        was made with a default_ttl)."""
        self._seg._put(key, value, _ttl_ms(ttl), 0)

    def add(self, key, value, ttl=None):
        """Store only if KEY is absent: True when stored.  TTL as in
        set."""
        return self._seg._put(key, value, _ttl_ms(ttl), 1)

    def replace(self, key, value, ttl=None):
        """Store only if KEY is present: True when stored.  Its TTL is
        replaced too, as in set."""
        return self._seg._put(key, value, _ttl_ms(ttl), 2)

    def __delitem__(self, key):
        if not self._seg._del(key):
            raise KeyError(key)

    def delete(self, key):
        """Remove KEY: True when it was there."""
        return self._seg._del(key)

    def incr(self, key, delta=1):
        """Add DELTA to the decimal integer stored under KEY (absent: 0);
        the new value."""
        return self._seg._incr(key, delta)

    def __contains__(self, key):
        return self._seg._get(key) is not None

    def __iter__(self):
        return iter(self._seg._keys())

    def __len__(self):
        return len(self._seg._keys())

    def keys(self):
        return self._seg._keys()


def _ttl_ms(ttl):
    """TTL seconds as the milliseconds _put takes (0: the default TTL);
    above the library's longest, _put raises OverflowError."""
    if ttl is None:
        return 0
    ms = int(ttl * 1000)
    if ms <= 0:
        raise ValueError("ttl must be positive (seconds) or None")
    return ms


class Segment(_Segment):
    __doc__ = _Segment.__doc__

    @property
    def dict(self):
        """The dictionary (a MutableMapping of bytes)."""
        return Dict(self)

    def top_keys(self):
        """The hot keys of the analyzer's window, most requested first:
        a list of TopKey."""
        rows, _info = self._top_keys()
        return [TopKey(*r) for r in rows]

    def top_info(self):
        """The span top_keys() covers and its bounds, as a dict."""
        return self._top_keys()[1]

    def limiters(self):
        """The limiters, as a list of dicts with the field names of
        `shmthrottle limiters --json`."""
        return self._limiters()["limiters"]

    def limited(self, limiter, client=None, wait=False, poll=None,
                timeout=None):
        """A decorator for outbound calls: each call takes one use of
        LIMITER first.  wait=False raises Throttled when refused; wait=True
        sleeps in Segment.wait (no polling, the GIL released, woken as soon
        as uses come back) until granted or TIMEOUT seconds passed (None:
        no limit), then raises Throttled.  POLL is accepted for
        compatibility and not used."""
        del poll

        def deco(fn):
            @functools.wraps(fn)
            def wrapper(*a, **kw):
                if wait:
                    granted = self.wait(limiter, client, timeout=timeout)
                else:
                    granted = self.try_use(limiter, client)
                if not granted:
                    raise Throttled(limiter)
                return fn(*a, **kw)
            return wrapper
        return deco
