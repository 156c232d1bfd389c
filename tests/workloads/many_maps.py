"""Maps one page of a file whose path is about 3,900 bytes long N times
(argv: DIR N), each a mapping of its own, so /proc/PID/maps grows to about
4 KiB a line (260 MB at 65,000), then spins in Python. What a local user
can make of one process under the default vm.max_map_count."""

import ctypes, os, sys
base = sys.argv[1]
n = int(sys.argv[2])
d = base
while len(d) < 3700:
    d = os.path.join(d, "d" * 200)
os.makedirs(d, exist_ok=True)
p = os.path.join(d, "f" * 100)
with open(p, "wb") as f:
    f.write(b"\0" * 4096)
fd = os.open(p, os.O_RDONLY)
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
got = 0
for i in range(n):
    r = libc.mmap(None, 4096, 1, 2, fd, 0)
    if r in (None, ctypes.c_void_p(-1).value):
        print("stopped at", i, ctypes.get_errno(), flush=True)
        break
    got += 1
print("mapped", got, len(p), flush=True)


def holdout_many_maps():
    x = 0
    while True:
        x += 1


holdout_many_maps()
