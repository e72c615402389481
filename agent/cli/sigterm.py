"""SIGTERM taken the way Ctrl-C is, for the long commands (optimize, bench).

A scheduler (Slurm at a job's time limit, Kubernetes, systemd) or a plain `kill` ends a process with SIGTERM.
Python's default for it is to die at once: no line saying where the run stopped, no error event in the trajectory
log, exit status 143 with nothing else. Under `on_sigterm()` the signal raises `Terminated`, a KeyboardInterrupt,
so the Ctrl-C path runs: the trajectories in flight stop at their next step, each log records the stop as infra
(a --resume continues it), and the command says how to resume, with exit status 143.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

SIGTERM_EXIT = 128 + signal.SIGTERM  # the shell's status for a process ended by SIGTERM
CTRL_C_EXIT = 130


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C's KeyboardInterrupt is."""

    how = "SIGTERM"


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


@contextmanager
def on_sigterm():
    """While inside, SIGTERM raises Terminated in the main thread (elsewhere, where no handler can be set: as it was)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_exit(exc: BaseException) -> int:
    """The exit status of a stop: 143 for SIGTERM, 130 for Ctrl-C."""
    return SIGTERM_EXIT if isinstance(exc, Terminated) else CTRL_C_EXIT
