"""Time in CPU tests that must hold on a loaded 2-core machine: wait for a state instead of sleeping a guess, and
count a call's CPU time instead of its wall time."""
from __future__ import annotations

import time
from typing import Callable


def wait_until(reached: Callable[[], object], timeout: float = 5.0, poll: float = 0.005) -> None:
    """Until `reached()` is true or `timeout` seconds passed (the test's own assertions then say what was missed)."""
    deadline = time.monotonic() + timeout
    while not reached() and time.monotonic() < deadline:
        time.sleep(poll)


def cpu_timed(fn, *args):
    """fn(*args) and the CPU seconds this thread spent in it: what a single-threaded call costs, not how long a loaded
    machine's other processes kept it waiting."""
    start = time.thread_time()
    result = fn(*args)
    return result, time.thread_time() - start
