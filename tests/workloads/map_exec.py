"""Maps each file named on the command line as executable code (PROT_EXEC,
as a loader or a JIT would) and spins in holdout_mapper, so a profiler
samples the process and looks at its executable mappings.

`--lying-headers PATH` first writes PATH itself: a 200 MiB sparse file whose
4 KiB of data is an ELF header claiming 3,200 program and 3,200 section
headers of 65,535 bytes each, both tables at offset 64."""

import mmap
import os
import struct
import sys


def write_lying_headers(path):
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    # e_type ET_DYN, e_machine x86_64, e_version, e_entry, e_phoff, e_shoff,
    # e_flags, e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 64, 0, 64,
                                 65535, 3200, 65535, 3200, 0)
    with open(path, "wb") as f:
        f.write(header.ljust(4096, b"\0"))
        f.truncate(200 << 20)


def holdout_mapper(maps):
    n = 0
    while True:
        for m in maps:
            n += m[0]


def main():
    maps = []
    paths = sys.argv[1:]
    if paths[:1] == ["--lying-headers"]:
        write_lying_headers(paths[1])
        paths = paths[1:]
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        maps.append(mmap.mmap(fd, 0, prot=mmap.PROT_READ | mmap.PROT_EXEC))
        os.close(fd)
    print("mapped", flush=True)
    holdout_mapper(maps)


main()
