"""Maps each file named on the command line as executable code (PROT_EXEC,
as a loader or a JIT would) and spins in holdout_mapper, so a profiler
samples the process and looks at its executable mappings."""

import mmap
import os
import sys


def holdout_mapper(maps):
    n = 0
    while True:
        for m in maps:
            n += m[0]


def main():
    maps = []
    for path in sys.argv[1:]:
        fd = os.open(path, os.O_RDONLY)
        maps.append(mmap.mmap(fd, 0, prot=mmap.PROT_READ | mmap.PROT_EXEC))
        os.close(fd)
    print("mapped", flush=True)
    holdout_mapper(maps)


main()
