"""Churns Python code objects for argv[1] seconds (default 20): threads
running chains of 120 functions, each a new code object with a name unique
on the host (copies of one function's code, renamed with the pid among
them, so that short runs one after another churn too), whose innermost one
naps 100 us.
Each thread keeps 30 chains (3600 code objects) and runs them in turn, so
its records stay in use as a busy program's would, and replaces one chain
with a new one at every turn. Every nap's stack is walked by the off-CPU
program: over ten thousand code objects in use and tens of thousands of new
ones a second reach the BPF walker, a user trying to push other users'
Python names out of the tables they share (issue 41)."""

import os
import sys
import threading
import time
import types

DEPTH = 120
THREADS = 3
POOL = 30


def step(fs, i):
    if i < len(fs):
        return fs[i](fs, i + 1)
    nap(0.0001)


nap = time.sleep
CODE = step.__code__
PID = os.getpid()


def chain(tag, gen):
    return [
        types.FunctionType(
            CODE.replace(co_name=f"c{PID}x{tag}_{gen}_{i}", co_qualname=f"c{PID}x{tag}_{gen}_{i}"),
            globals(),
        )
        for i in range(DEPTH)
    ]


def churn(tag, deadline, counts):
    pool = [chain(tag, g) for g in range(POOL)]
    gen = POOL
    while time.monotonic() < deadline:
        for fs in pool:
            fs[0](fs, 1)
        pool[gen % POOL] = chain(tag, gen)
        gen += 1
    counts[tag] = gen


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    deadline = time.monotonic() + seconds
    counts = {}
    threads = [
        threading.Thread(target=churn, args=(t, deadline, counts)) for t in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(sum(counts.values()) * DEPTH)
