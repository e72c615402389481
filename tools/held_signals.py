"""Ctrl-C and SIGTERM held back while a record is being made, and raised as soon as it is whole.

The stop signals raise in the main thread wherever it is (agent/cli/sigterm.py). Raised inside pydantic's serializer
(`model_dump_json`), the stop comes out wrapped as its error (`PydanticSerializationError: Error serializing to JSON:
KeyboardInterrupt`): the command then ends as a crash (a traceback, exit status 1) instead of a stop (one line, 130 or
143), and the record it was writing is lost. Used where the main thread serializes a record during a run: the
trajectory log's lines (agent/records/rundir.py) and the compile cache's entries (cache.py). Inside
`signals_held()` a stop signal is only noted, and raised again, through the handler it would have met, once the block
has ended: the record is written whole and the stop is a stop.

Elsewhere (a state update's dump, another extension's callback) the window stays, so the stop handlers that
agent/cli/sigterm.py installs also record each stop they raise (`record_stop`). A run that fails with some other
exception after a stop was recorded (`stop_since`) is taken as stopped by it, not as crashed (agent/loop/optimize.py).
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_stops: list[int] = []  # each stop signal a recording handler raised in this process, in order


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C's KeyboardInterrupt is (agent/cli/sigterm.py)."""

    how = "SIGTERM"


def record_stop(signum: int) -> None:
    _stops.append(signum)


def stops_so_far() -> int:
    """A mark for stop_since: how many stops were recorded up to now."""
    return len(_stops)


def stop_since(mark: int, exc: BaseException) -> KeyboardInterrupt | None:
    """The stop that `exc` stands for, when it is no stop itself but a stop was recorded since `mark` on this (the
    main) thread: a handler's KeyboardInterrupt that an extension wrapped as its own error. None otherwise."""
    if isinstance(exc, KeyboardInterrupt) or len(_stops) <= mark:
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    return Terminated() if _stops[-1] == signal.SIGTERM else KeyboardInterrupt()


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM, where a Python handler would raise them, until the block ends; then raise each noted one."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers run in the main thread only: a stop never raises in this one
        return
    # read before anything is swapped: a stop raised while swapping or putting back leaves no handler lost
    held = {sig: handler for sig in STOP_SIGNALS if callable(handler := signal.getsignal(sig))}
    noted: list[int] = []
    holding = True

    def note(signum, frame):
        if holding:
            noted.append(signum)
        else:  # the block is over but a stop cut the putting back short: this handler still stands in for its own
            held[signum](signum, frame)

    try:
        for sig in held:  # the Python handlers (Ctrl-C's default, sigterm's): the ones that raise
            signal.signal(sig, note)
        yield
    finally:
        holding = False
        for sig, handler in held.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)  # through the handler put back: KeyboardInterrupt, Terminated (or a held outer block)
