"""Churns Python code objects for argv[1] seconds (default 20): chains of 60
freshly compiled functions with unique names, the innermost napping 100 us,
each chain run a few times and dropped. Every nap's stack is walked by the
off-CPU program (and CPU samples land in compile), so thousands of new code
objects a second reach the BPF walker: a user trying to push other users'
Python names out of the tables they share (issue 41)."""

import sys
import time

DEPTH = 60


def chain(gen):
    src = []
    for i in range(DEPTH):
        inner = f"f{gen}_{i + 1}()" if i + 1 < DEPTH else "nap(0.0001)"
        src.append(f"def f{gen}_{i}():\n    {inner}\n")
    ns = {"nap": time.sleep}
    exec(compile("".join(src), f"churn{gen}.py", "exec"), ns)
    return ns[f"f{gen}_0"]


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    deadline = time.monotonic() + seconds
    gen = 0
    while time.monotonic() < deadline:
        f = chain(gen)
        for _ in range(3):
            f()
        gen += 1
    print(gen)
