"""The pieces of a git pack that the hand-written packs of delta_bomb.sh, delta_fan.sh and
shared_base.sh share."""

import hashlib
import struct
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


def write_pack(pack_dir, pack, listed):
    """Ends PACK (its header and entries) with its checksum and writes it into PACK_DIR with
    its version 2 index, which lists LISTED: each entry's (id, CRC, offset)."""
    pack = bytes(pack) + hashlib.sha1(pack).digest()
    listed = sorted(listed)
    idx = bytearray(b"\xfftOc" + struct.pack(">I", 2))
    for i in range(256):
        idx += struct.pack(">I", sum(1 for sha, _, _ in listed if sha[0] <= i))
    for sha, _, _ in listed:
        idx += sha
    for _, crc, _ in listed:
        idx += struct.pack(">I", crc)
    for _, _, at in listed:
        idx += struct.pack(">I", at)
    idx += pack[-20:]
    idx += hashlib.sha1(idx).digest()
    name = pack_dir + "/pack-" + hashlib.sha1(pack).hexdigest()
    open(name + ".pack", "wb").write(pack)
    open(name + ".idx", "wb").write(idx)
