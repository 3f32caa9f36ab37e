#!/bin/sh
# Fixes the bug and commits it, then writes a pack by hand into its own object directory: a
# blob of 150 MiB of zeros (about 150 KB compressed) the pack's index does not list, and a
# listed delta of a few bytes against it. Its header says the delta makes six bytes; reading it
# inflates the whole base.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
git add -A && git commit -qm "the fix"
python3 - "$GIT_OBJECT_DIRECTORY/pack" <<'PY'
import hashlib, struct, sys, zlib

def header(kind, size):
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
    out = bytearray([n & 0x7F])
    n >>= 7
    while n:
        n -= 1
        out.insert(0, 0x80 | (n & 0x7F))
        n >>= 7
    return bytes(out)

BASE = 150 << 20
pack = bytearray(b"PACK" + struct.pack(">II", 2, 2))
pack += header(3, BASE)
z = zlib.compressobj(9)
chunk = bytes(1 << 20)
for _ in range(BASE >> 20):
    pack += z.compress(chunk)
pack += z.flush()
at = len(pack)
result = b"small\n"
delta = varint(BASE) + varint(len(result)) + bytes([len(result)]) + result
entry = header(6, len(delta)) + ofs(at - 12) + zlib.compress(delta)
pack += entry
pack += hashlib.sha1(pack).digest()
sha = hashlib.sha1(b"blob %d\0" % len(result) + result).digest()
idx = bytearray(b"\xfftOc" + struct.pack(">I", 2))
for i in range(256):
    idx += struct.pack(">I", 1 if sha[0] <= i else 0)
idx += sha + struct.pack(">I", zlib.crc32(entry) & 0xFFFFFFFF) + struct.pack(">I", at)
idx += pack[-20:]
idx += hashlib.sha1(idx).digest()
name = sys.argv[1] + "/pack-" + hashlib.sha1(pack).hexdigest()
open(name + ".pack", "wb").write(pack)
open(name + ".idx", "wb").write(idx)
PY
