#!/bin/sh
# Fixes the bug and commits it, then writes a pack by hand into its own object directory: a
# blob of 150 MiB of zeros (about 150 KB compressed) the pack's index does not list, and a
# listed delta of a few bytes against it. Its header says the delta makes six bytes; reading it
# inflates the whole base.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
git add -A && git commit -qm "the fix"
python3 - "$GIT_OBJECT_DIRECTORY/pack" "$(dirname "$0")" <<'PY'
import hashlib, struct, sys, zlib

sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[2])
from pack_parts import header, ofs, varint, write_pack, zero_blob

BASE = 150 << 20
pack = bytearray(b"PACK" + struct.pack(">II", 2, 2))
pack += zero_blob(BASE)
at = len(pack)
result = b"small\n"
delta = varint(BASE) + varint(len(result)) + bytes([len(result)]) + result
entry = header(6, len(delta)) + ofs(at - 12) + zlib.compress(delta)
pack += entry
sha = hashlib.sha1(b"blob %d\0" % len(result) + result).digest()
write_pack(sys.argv[1], pack, [(sha, zlib.crc32(entry) & 0xFFFFFFFF, at)])
PY
