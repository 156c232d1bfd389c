"""Writes N files of one page each under DIR (argv: DIR N [CHURN]), maps
each as executable code (PROT_EXEC, as a loader or a JIT would), each a
mapping and an inode of its own, prints "mapped N" and sleeps: what a local
user can make of one process under the default vm.max_map_count, for a
profiler that keeps something per mapped file. With CHURN, it then forks
children for ever, CHURN alive at a time, each living 20 ms: a new process
of N mappings to read every few milliseconds, as a prefork server does."""

import ctypes
import os
import signal
import sys

base = sys.argv[1]
n = int(sys.argv[2])
os.makedirs(base, exist_ok=True)
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
PROT_READ, PROT_EXEC, MAP_PRIVATE = 1, 4, 2
page = b"\xc3" * 4096  # ret
got = 0
for i in range(n):
    p = os.path.join(base, str(i))
    with open(p, "wb") as f:
        f.write(page)
    fd = os.open(p, os.O_RDONLY)
    r = libc.mmap(None, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0)
    os.close(fd)
    if r in (None, ctypes.c_void_p(-1).value):
        print("stopped at", i, ctypes.get_errno(), flush=True)
        break
    got += 1
print("mapped", got, flush=True)
churn = int(sys.argv[3]) if len(sys.argv) > 3 else 0
if churn == 0:
    while True:
        signal.pause()
alive = 0
forks = 0
while True:
    while alive < churn:
        if os.fork() == 0:
            libc.usleep(20000)
            os._exit(0)
        alive += 1
        forks += 1
        if forks % 500 == 0:
            print("forked", forks, flush=True)
    os.wait()
    alive -= 1
