"""SIGTERM taken the way Ctrl-C is, for the long commands (optimize, bench).

A scheduler (Slurm at a job's time limit, Kubernetes, systemd) or a plain `kill` ends a process with SIGTERM.
Python's default for it is to die at once: no line saying where the run stopped, no error event in the trajectory
log, exit status 143 with nothing else. Under `on_sigterm()` the signal raises `Terminated`, a KeyboardInterrupt,
so the Ctrl-C path runs: the trajectories in flight stop at their next step, each log records the stop as infra
(a --resume continues it), and the command says how to resume, with exit status 143. Ctrl-C, where Python's own
handler stands, gets one that does the same and records the stop as well, as SIGTERM's does (tools/held_signals.py:
a stop that a library wrapped as its own error is still known for a stop).
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

from ptxbench.tools.held_signals import Terminated, record_stop

SIGTERM_EXIT = 128 + signal.SIGTERM  # the shell's status for a process ended by SIGTERM
CTRL_C_EXIT = 130


def _raise_terminated(signum, frame) -> None:
    record_stop(signum)
    raise Terminated()


def _raise_interrupt(signum, frame) -> None:
    record_stop(signum)
    signal.default_int_handler(signum, frame)


@contextmanager
def on_sigterm():
    """While inside, SIGTERM raises Terminated in the main thread, and both it and Ctrl-C are recorded (elsewhere,
    where no handler can be set: as it was). A Ctrl-C that is ignored (a background job's) or handled otherwise stays so."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous_term = signal.getsignal(signal.SIGTERM)
    ctrl_c = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # else ignored or someone else's: left
    try:
        signal.signal(signal.SIGTERM, _raise_terminated)
        if ctrl_c:
            signal.signal(signal.SIGINT, _raise_interrupt)
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        if ctrl_c:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def stop_exit(exc: BaseException) -> int:
    """The exit status of a stop: 143 for SIGTERM, 130 for Ctrl-C."""
    return SIGTERM_EXIT if isinstance(exc, Terminated) else CTRL_C_EXIT
