#!/bin/sh
# Fixes the bug, then tries to type into the terminal mvk runs in (TIOCSTI on its controlling
# terminal, `/dev/tty`: the user's shell would run what it typed once mvk exits), opened for
# reading and writing, then for reading only, and says what the kernel let it do.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
python3 - <<'PY'
import fcntl, os, termios
for mode, name in ((os.O_RDWR, "tty-rw"), (os.O_RDONLY, "tty-read")):
    try:
        fd = os.open("/dev/tty", mode | os.O_NOCTTY)
    except OSError as e:
        print(f"{name}: not opened ({e.strerror})")
        continue
    try:
        # A comment sign: harmless wherever it lands.
        fcntl.ioctl(fd, termios.TIOCSTI, b"#")
        print(f"{name}: opened, TIOCSTI allowed")
    except OSError as e:
        print(f"{name}: opened, TIOCSTI denied ({e.strerror})")
    os.close(fd)
PY
