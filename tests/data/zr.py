#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Pack a file that is mostly zero bytes (a snapshot image, a segment) into
the zero-run form the tests read back (tests/testutil.c, tu_zr_load):

    "SHMTZR1\\n"  u64 length of the whole file
    then chunks:  u64 offset, u32 length, u32 0, the chunk's bytes
                  (in order, not overlapping; the rest is zero bytes)

Usage: zr.py pack IN OUT | zr.py unpack IN OUT
"""
import struct
import sys

MAGIC = b"SHMTZR1\n"
GAP = 16  # zero runs shorter than this stay inside a chunk


def pack(data):
    out = [MAGIC, struct.pack("<Q", len(data))]
    i, n = 0, len(data)
    while i < n:
        while i < n and data[i] == 0:
            i += 1
        if i >= n:
            break
        j, zeros = i, 0
        while j < n and zeros < GAP:
            zeros = zeros + 1 if data[j] == 0 else 0
            j += 1
        end = j - zeros
        out.append(struct.pack("<QII", i, end - i, 0))
        out.append(data[i:end])
        i = end
    return b"".join(out)


def unpack(blob):
    assert blob[:8] == MAGIC
    (n,) = struct.unpack_from("<Q", blob, 8)
    data = bytearray(n)
    at = 16
    while at < len(blob):
        off, ln, _ = struct.unpack_from("<QII", blob, at)
        at += 16
        data[off:off + ln] = blob[at:at + ln]
        at += ln
    return bytes(data)


if __name__ == "__main__":
    mode, src, dst = sys.argv[1:4]
    with open(src, "rb") as f:
        blob = f.read()
    with open(dst, "wb") as f:
        f.write(pack(blob) if mode == "pack" else unpack(blob))
