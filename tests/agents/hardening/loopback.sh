#!/bin/sh
# A gate in a sandbox without network: a server on 127.0.0.1 must answer a client there, and an
# address off the machine must be unreachable, and the gate's network namespace must not be the
# one named by $1 (mvk's, as `readlink /proc/self/ns/net` shows it) and hold no interface but
# `lo`: an unreachable address alone proves nothing on a machine without a route. Prints what it saw; exits 0 only if all hold.
exec python3 - "$1" <<'PY'
import os, socket, sys
ok = True
mine = os.readlink("/proc/self/ns/net")
if mine == sys.argv[1]:
    print("netns: shared", mine)
    ok = False
else:
    print("netns: own", mine)
# Asked of the kernel for this namespace (/sys/class/net shows the one sysfs was mounted in).
names = sorted(name for _, name in socket.if_nameindex())
print("interfaces:", " ".join(names))
if names != ["lo"]:
    ok = False
try:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname(), timeout=5)
    conn, _ = server.accept()
    client.sendall(b"ping")
    print("loopback:", conn.recv(4).decode())
except OSError as e:
    print("loopback: failed:", e)
    ok = False
try:
    socket.create_connection(("192.0.2.1", 80), timeout=3)
    print("outside: reached")
    ok = False
except OSError as e:
    print("outside: unreachable:", e.strerror or e)
sys.exit(0 if ok else 1)
PY
