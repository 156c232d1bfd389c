"""A Python process that scribbles over its own interpreter while it runs,
as any local user may: emberd reads this memory, and must stay unharmed.

Run: python3 py_hostile.py SECONDS. A victim thread spins in victim_spin();
the main thread, through ctypes, in turns:
- points the victim's interpreter frame's `previous` (up to 3.10 its frame
  object's `f_back`) at itself (a loop),
- points it at an unmapped address,
- gives a function a 1 MB qualified name with ';' and newlines in it,
- gives a function a line table of random bytes,
then puts back what it changed, so the process itself keeps running.
"""
import ctypes
import gc
import os
import sys
import threading
import time

DEADLINE = time.monotonic() + float(sys.argv[1] if len(sys.argv) > 1 else 10)
MINOR = sys.version_info[:2]
# _PyInterpreterFrame.previous; PyFrameObject.f_frame is at 24 on 3.11-3.13.
# Up to 3.10 the frame object is the frame: f_back at 24.
FRAME_OBJECTS = MINOR <= (3, 10)
PREVIOUS = 24 if FRAME_OBJECTS else 48 if MINOR == (3, 11) else 8
F_FRAME = 24
stop_victim = False


def victim_spin():
    x = 0
    while not stop_victim: x += 1
    return x


def victim():
    return victim_spin()


def spin_named(n):
    x = 0
    for i in range(n): x += i
    return x


def main():
    global stop_victim
    t = threading.Thread(target=victim, name="victim")
    t.start()
    time.sleep(0.2)
    frame = sys._current_frames()[t.ident]
    while frame.f_code.co_name != "victim_spin":
        time.sleep(0.01)
        frame = sys._current_frames()[t.ident]
    if FRAME_OBJECTS:
        # The collector walks frame objects' f_back: not while it is
        # scribbled on.
        gc.disable()
        iframe = id(frame)
    else:
        iframe = ctypes.c_void_p.from_address(id(frame) + F_FRAME).value
    prev = ctypes.c_void_p.from_address(iframe + PREVIOUS)
    saved = prev.value
    huge = "A" * 1_000_000 + ";\nB"
    junk = os.urandom(5000)
    if MINOR >= (3, 11):
        long_name = spin_named.__code__.replace(co_qualname=huge)
        bad_lines = spin_named.__code__.replace(co_linetable=junk)
    else:
        long_name = spin_named.__code__.replace(co_name=huge)
        bad_lines = spin_named.__code__.replace(
            **{"co_linetable" if MINOR == (3, 10) else "co_lnotab": junk})
    original = spin_named.__code__
    print("ready", flush=True)
    turn = 0
    while time.monotonic() < DEADLINE:
        mode = turn % 4
        if mode == 0:
            prev.value = iframe
        elif mode == 1:
            prev.value = 0x7FFFDEAD0000
        elif mode == 2:
            spin_named.__code__ = long_name
        else:
            spin_named.__code__ = bad_lines
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            spin_named(20000)
        prev.value = saved
        spin_named.__code__ = original
        turn += 1
    stop_victim = True
    t.join()


main()
