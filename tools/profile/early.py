"""A profile started beside the candidate's own timing, used only if the evaluation then asks for that level.

A profiled turn used to run in turn: the timing job, then ncu's process (interpreter, imports, CUDA context,
cubin: several seconds before the replay is ready), then the replay, then the report. The first part needs no
GPU time, so it can overlap the timing: `EarlyProfile` starts the ncu run at the level the evaluation will
most likely want (`EvalOptions.profile_level(passed=True)`) as soon as the candidate is submitted. Its replay
stops at the handshake's `ready` (it runs no kernel before `go`: handshake.py) and waits there until the
evaluation decides: the same level -> the GPU is taken and the replay runs as any gated replay would; another
level, or none (the kernel failed, hung, or needs a full profile as a new best) -> taking the GPU fails, which
kills ncu and the replay (gated.py), and the evaluation profiles as before.

    early = EarlyProfile(start=lambda hold: measure_candidate(..., hold=hold), level="verdict",
                         hold=lambda: pool.exclusive(device))
    ...timing...
    measured = early.claim(level)    # (summary, seconds) or None

Under the new-best policy a pass gets the verdict unless it beats the best so far, which only its timing tells; when
early slots are to spare, `EarlyChoice` starts the full profile beside the verdict one and keeps whichever the
evaluation asks for. A new best on a trajectory's last turns then no longer waits for ncu's start-up after its timing
(the tail of a run on several GPUs, bench/results/eval_throughput.md); the run not claimed dies at its gate, its
cost a few CPU-seconds and no GPU time.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from .summary import ProfileSummary


class ProfileNotWanted(RuntimeError):
    """The evaluation decided on another profile level (or none): the early replay must not take the GPU."""


class EarlyProfile:
    expect_path = None  # the file the evaluator writes its verified sketch to before the claim (tools/evaluate.py)

    def __init__(self, start: Callable[[Callable], ProfileSummary], level: str, hold: Callable, device: int | None = None,
                 on_end: Callable[[], None] | None = None):
        self.level, self.device = level, device
        self._on_end = on_end  # called once the early run has ended, whichever way (the evaluator's slot count)
        self._hold = hold
        self._decided = threading.Event()
        self._wanted = False
        self._summary: ProfileSummary | None = None
        self._seconds = 0.0
        self._undecided_s = 0.0
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, args=(start,), name="early-profile", daemon=True)
        self._thread.start()

    def _run(self, start: Callable[[Callable], ProfileSummary]) -> None:
        try:
            self._summary = start(self._gate)
        except Exception as exc:  # noqa: BLE001 - a failed early run only means the evaluation profiles afresh
            self._summary = ProfileSummary(ok=False, mode=self.level, error=f"early profile: {type(exc).__name__}: {exc}")
        finally:
            self._seconds = time.perf_counter() - self._started
            if self._on_end is not None:
                self._on_end()

    @contextmanager
    def _gate(self) -> Iterator[int]:
        """The replay's hold: wait for the evaluation's decision, then take the GPU only if this level is wanted."""
        asked = time.perf_counter()
        self._decided.wait()
        self._undecided_s = time.perf_counter() - asked  # not a wait for the GPU: taken out of gpu_wait_s
        if not self._wanted:
            raise ProfileNotWanted(f"the evaluation did not ask for a {self.level} profile")
        with self._hold() as device:
            yield device

    def claim(self, level: str) -> tuple[ProfileSummary, float] | None:
        """Decide. The level the early run was started at -> wait for it and return (summary, seconds since the
        start); any other level -> None at once (the early run is killed at its gate, in the background)."""
        self._wanted = level == self.level
        self._decided.set()
        if not self._wanted:
            return None
        self._thread.join()
        summary = self._summary
        if summary is not None and summary.gpu_wait_s is not None:
            summary = summary.model_copy(update={"gpu_wait_s": round(max(0.0, summary.gpu_wait_s - self._undecided_s), 3)})
        return summary, self._seconds

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the early run to end (claimed, or killed at its gate); True when it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def drop(self) -> None:
        """Nothing will be claimed (the evaluation ended another way)."""
        if not self._decided.is_set():
            self.claim("none")


class EarlyChoice:
    """Early runs of one evaluation at different levels, on one device: `claim(level)` kills every other run at its
    gate first, then claims the run at that level (None when there is none); the same interface as EarlyProfile."""

    expect_path = None

    def __init__(self, runs: list[EarlyProfile]):
        if not runs or len({run.device for run in runs}) != 1 or len({run.level for run in runs}) != len(runs):
            raise ValueError("an early choice holds runs of distinct levels on one device")
        self.runs = runs
        self.device = runs[0].device
        self.level = runs[0].level  # the most likely one
        self.levels = [run.level for run in runs]

    def claim(self, level: str) -> tuple[ProfileSummary, float] | None:
        for run in self.runs:
            if run.level != level:
                run.drop()
        wanted = [run for run in self.runs if run.level == level]
        return wanted[0].claim(level) if wanted else None

    def join(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        return all(run.join(None if deadline is None else max(0.0, deadline - time.monotonic())) for run in self.runs)

    def drop(self) -> None:
        for run in self.runs:
            run.drop()
