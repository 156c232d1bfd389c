"""A Python program with known functions, for emberd's Python tests.

Run: python3 py_mixed.py SECONDS. Hot loops sit on single lines so that
line-level differences between profilers do not split a function.
Threads run distinct functions; one sleeps (off-CPU), one hashes a large
buffer with the GIL released, the main thread mixes nested calls, a class
method, a C call back into Python, a generator, deep recursion and code
compiled with exec in rotation (code objects freed and their memory reused).
"""
import hashlib
import sys
import threading
import time

DEADLINE = time.monotonic() + float(sys.argv[1] if len(sys.argv) > 1 else 10)


def spin(n):
    x = 0
    for i in range(n): x += i * i
    return x


class Holdout:
    def holdout_py_outer(self):
        return self.holdout_py_inner()

    def holdout_py_inner(self):
        return spin(20000)


def holdout_sort_key(v):
    return spin(40) + v


def holdout_sorting():
    return sorted(range(300), key=lambda v: holdout_sort_key(v))


def holdout_gen():
    for i in range(50):
        yield spin(400)


def holdout_generator():
    return sum(holdout_gen())


def holdout_recurse(depth):
    if depth == 0:
        return spin(20000)
    return holdout_recurse(depth - 1)


def holdout_exec_rotation(i):
    # Compiled anew each call: the previous call's code objects are freed
    # and their memory reused by the next ones, with other names.
    n = i % 4
    ns = {"spin": spin}
    exec(compile("def holdout_exec_%d():\n    return spin(20000)\n" % n, "rot%d.py" % n, "exec"), ns)
    return ns["holdout_exec_%d" % n]()


def holdout_main_loop():
    h = Holdout()
    i = 0
    while time.monotonic() < DEADLINE:
        h.holdout_py_outer()
        holdout_sorting()
        holdout_generator()
        holdout_recurse(int(sys.argv[2]) if len(sys.argv) > 2 else 30)
        holdout_exec_rotation(i)
        i += 1


def holdout_thread_spin():
    while time.monotonic() < DEADLINE:
        spin(20000)


def holdout_sleeper():
    while time.monotonic() < DEADLINE:
        time.sleep(0.05)


def holdout_hasher():
    buf = b"x" * (8 << 20)
    # A fifth of a CPU: with the GIL-bound threads it leaves the 2-CPU test
    # machine room for the profilers, so on-CPU sampling (emberd) and
    # py-spy's active-thread sampling see the same threads running.
    while time.monotonic() < DEADLINE:
        hashlib.sha256(buf).digest()
        time.sleep(0.1)


if __name__ == "__main__":
    threads = [threading.Thread(target=f, name=f.__name__) for f in
               (holdout_thread_spin, holdout_sleeper, holdout_hasher)]
    for t in threads:
        t.start()
    print("ready", flush=True)
    holdout_main_loop()
    for t in threads:
        t.join()
