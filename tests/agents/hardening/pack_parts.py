"""The pieces of a git pack that the hand-written packs of delta_bomb.sh and delta_fan.sh share."""

import zlib


def header(kind, size):
    """An entry's header: its type and its (inflated) size."""
    out = bytearray()
    c = (kind << 4) | (size & 15)
    size >>= 4
    while size:
        out.append(c | 0x80)
        c = size & 0x7F
        size >>= 7
    out.append(c)
    return bytes(out)


def varint(n):
    """A size at the start of a delta's data."""
    out = bytearray()
    while True:
        c = n & 0x7F
        n >>= 7
        if n:
            out.append(c | 0x80)
        else:
            out.append(c)
            return bytes(out)


def ofs(n):
    """An OFS_DELTA's distance back to its base."""
    out = bytearray([n & 0x7F])
    n >>= 7
    while n:
        n -= 1
        out.insert(0, 0x80 | (n & 0x7F))
        n >>= 7
    return bytes(out)


def zero_blob(size):
    """A whole blob entry of SIZE zero bytes: its header, then the zeros compressed, a
    megabyte at a time (so the writer never holds the inflated blob)."""
    out = bytearray(header(3, size))
    z = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    for _ in range(size >> 20):
        out += z.compress(chunk)
    out += z.compress(bytes(size & ((1 << 20) - 1)))
    out += z.flush()
    return bytes(out)
