"""argv[1] threads (default 32) pass argv[3] tokens (default 8) around a
ring of pipes for argv[2] s (default 10): each thread blocks reading its
pipe, then calls down to a random depth (1 to 80) and writes to the next
thread's pipe. Thousands of blocks a second at as many distinct stacks.
Writes to argv[4] (if given), summed over the worker threads from start
to stop, in us: wall time minus CPU time (time off CPU, an upper bound of
what a profiler charges), and of that the time spent runnable waiting for a
CPU (/proc/self/task/TID/schedstat), which a profiler counting only
blocked states leaves out when the thread was preempted.

With argv[5] (us, default 0), a thread that got its token also naps a
random time up to that long before it calls back up: a pool whose workers
block on a pipe and then sleep briefly, at the same random depths, tens
of thousands of blocks a second across the pool (issue 43)."""

import os
import random
import sys
import threading
import time


def schedstat():
    """(ns on CPU, ns runnable waiting for a CPU) of the calling thread."""
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        run, wait, _ = f.read().split()
    return int(run), int(wait)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 32
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    out = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "-" else None
    nap = float(sys.argv[5]) / 1e6 if len(sys.argv) > 5 else 0.0
    pipes = [os.pipe() for _ in range(n)]
    until = time.monotonic() + secs
    blocked = [(0, 0)] * n
    start = threading.Barrier(n + 1)

    def down(depth, me, rng):
        if depth > 0:
            return down(depth - 1, me, rng) + 1
        os.write(pipes[(me + 1) % n][1], b"x")
        os.read(pipes[me][0], 1)
        if nap:
            time.sleep(rng.uniform(0, nap))
        return 0

    def worker(me):
        rng = random.Random(me)
        start.wait()
        wall0, (run0, wait0) = time.monotonic_ns(), schedstat()
        while time.monotonic() < until:
            down(rng.randint(1, 80), me, rng)
        wall1, (run1, wait1) = time.monotonic_ns(), schedstat()
        blocked[me] = ((wall1 - wall0) - (run1 - run0), wait1 - wait0)
        # Keep the ring moving for the others until they stop too.
        os.write(pipes[(me + 1) % n][1], b"x" * 64)

    threads = [threading.Thread(target=worker, args=(i,), name=f"w{i}") for i in range(n)]
    for t in threads:
        t.start()
    for i in range(tokens):
        os.write(pipes[i * n // tokens][1], b"x")
    start.wait()
    for t in threads:
        t.join()
    if out:
        with open(out, "w") as f:
            off = sum(b[0] for b in blocked) // 1000
            runnable = sum(b[1] for b in blocked) // 1000
            f.write(f"{off} {runnable}\n")


main()
