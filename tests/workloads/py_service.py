"""A Python service for argv[1] seconds (default 20): it waits for a
request (a 200 ms nap), then handles it for about 40 ms of CPU in
handle_request -> render_page -> escape_text. Its code objects are met a
few times a second, each time after a pause, as a real service's handlers
are: in a table where the least recently used record goes first, another
user's churn can push them out between a sample and the drain that names
it (issue 41)."""

import sys
import time


def escape_text(n):
    s = 0
    for i in range(n):
        s += (i * 31) % 7
    return s


def render_page(deadline):
    total = 0
    while time.monotonic() < deadline:
        total += escape_text(500)
    return total


def handle_request():
    return render_page(time.monotonic() + 0.04)


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
