#!/bin/sh
# Fixes the bug and commits it, then writes a pack by hand into its own object directory: one
# listed delta (a REF_DELTA) whose base is the blob of src/calc.sh before the fix, which only
# the repository's shared store holds. Read through the store, such a base is rebuilt from the
# store's own chain of deltas at each read; git itself keeps no such (thin) pack.
base=$(git rev-parse HEAD:src/calc.sh)
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
git add -A && git commit -qm "the fix"
python3 - "$GIT_OBJECT_DIRECTORY/pack" "$(dirname "$0")" "$base" "$(git cat-file -s "$base")" <<'PY'
import hashlib, struct, sys, zlib

sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[2])
from pack_parts import header, varint, write_pack

base, base_size = bytes.fromhex(sys.argv[3]), int(sys.argv[4])
pack = bytearray(b"PACK" + struct.pack(">II", 2, 1))
at = len(pack)
result = b"made from a base in the shared store\n"
delta = varint(base_size) + varint(len(result)) + bytes([len(result)]) + result
entry = header(7, len(delta)) + base + zlib.compress(delta)
pack += entry
sha = hashlib.sha1(b"blob %d\0" % len(result) + result).digest()
write_pack(sys.argv[1], pack, [(sha, zlib.crc32(entry) & 0xFFFFFFFF, at)])
PY
