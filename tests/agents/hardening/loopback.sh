#!/bin/sh
# A gate in a sandbox without network: a server on 127.0.0.1 must answer a client there, and an
# address off the machine must be unreachable. Prints what it saw; exits 0 only if both hold.
exec python3 - <<'PY'
import socket, sys
ok = True
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
