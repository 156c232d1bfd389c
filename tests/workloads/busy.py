"""CPU-bound Python for argv[1] seconds (default 10): a few nested functions."""

import sys
import time


def leaf_arith(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


def leaf_strings(n):
    return len("".join(str(i) for i in range(n)))


def middle(n):
    return leaf_arith(n) + leaf_strings(n // 4)


def outer(deadline):
    total = 0
    while time.monotonic() < deadline:
        total += middle(2000)
    return total


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    # For whoever waits for the interpreter's start-up to be over.
    print("started", flush=True)
    print(outer(time.monotonic() + seconds))
