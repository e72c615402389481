"""Run ncu on a replay that follows the ready/go/done handshake, holding the GPU only from go to done.

    rc, log, times = run_gated(cmd, env=..., folder=..., hold=lambda: pool.exclusive(device), limit_s=120)

`hold()` is a context manager that takes the GPU (it may wait for it: that wait has no limit here,
the pool's jobs have their own watchdogs). Each other phase has `limit_s`: start-up to `ready`,
`go` to `done`, `done` to the end of ncu (the report is written then). A phase that overruns, or
a `hold` that fails, kills the whole process group (ncu and the replay) before the GPU is given
back; the result is then rc None and the reason in the log, never an exception.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from .handshake import DONE, GO, POLL_S, READY, Handshake


class GateTimes(BaseModel):
    ready_s: float | None = None  # start -> ready (interpreter, imports, context, cubin load)
    wait_s: float = 0.0           # ready -> the GPU taken
    held_s: float = 0.0           # the GPU held: go -> done (or the replay's end)
    phase: str = ""               # where a run that did not finish cleanly stopped


def _until(cond: Callable[[], bool], limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process's whole group (ncu and the replay it started), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_gated(cmd: list[str], *, env: dict | None, folder: Path, hold: Callable[[], AbstractContextManager],
              limit_s: float) -> tuple[int | None, str, GateTimes]:
    folder.mkdir(parents=True, exist_ok=True)
    gate, times = Handshake(folder), GateTimes()
    log_path = folder / "ncu.out"
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
    note = ""
    try:
        if not _until(lambda: gate.seen(READY) or proc.poll() is not None, limit_s):
            times.phase, note = "start", f"the replay was not ready within {limit_s:g} s"
        elif gate.seen(READY):
            times.ready_s = time.monotonic() - start
            asked = time.monotonic()
            try:
                with hold():
                    got = time.monotonic()
                    times.wait_s = got - asked
                    try:
                        gate.signal(GO)
                        if not _until(lambda: gate.seen(DONE) or proc.poll() is not None, limit_s):
                            times.phase, note = "replay", f"the profiled replay did not finish within {limit_s:g} s"
                            kill_group(proc)  # before the GPU is given back: a hung kernel dies with its context
                    finally:
                        times.held_s = time.monotonic() - got
            except Exception as exc:  # noqa: BLE001 - taking the GPU failed: a reason, not a crash
                times.phase, note = "hold", f"the GPU could not be taken for the replay: {type(exc).__name__}: {exc}"
        if not note:
            try:
                proc.wait(timeout=limit_s)
            except subprocess.TimeoutExpired:
                times.phase, note = "finish", f"ncu did not finish its report within {limit_s:g} s"
    finally:
        if proc.poll() is None:
            kill_group(proc)
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    if note:
        return None, (text + f"\n==PTXBENCH== {note}").strip(), times
    return proc.returncode, text, times
