"""A Python service for argv[1] seconds (default 20): it waits for a
request (a 200 ms nap), then handles it in handle_request -> render_page ->
escape_text: a fixed amount of work, about 40 ms of CPU here. Its code
objects are met a few times a second, each time after a pause, as a real
service's handlers are: in a table where the least recently used record
goes first, another user's churn can push them out between a sample and
the drain that names it (issue 41).

The work per request is fixed, not a 40 ms deadline: on a host whose CPUs
are taken (the test runs it beside a busy process and a churner), a
deadline gave the handler only what CPU it got within 40 ms of wall time,
48 samples in 8 s on one machine where about 130 were meant (issue 60)."""

import sys
import time


def escape_text(n):
    s = 0
    for i in range(n):
        s += (i * 31) % 7
    return s


def render_page(parts):
    total = 0
    for _ in range(parts):
        total += escape_text(500)
    return total


def handle_request():
    # 1,000 parts: 37 ms of CPU on Debian's python3 3.11 here.
    return render_page(1000)


def serve(deadline):
    handled = 0
    while time.monotonic() < deadline:
        time.sleep(0.2)
        handle_request()
        handled += 1
    return handled


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    print(serve(time.monotonic() + seconds))
