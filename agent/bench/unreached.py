"""A model the bench never reached: a call of it could not open a connection at all (its host's name does not
resolve, the connection is refused, no route, the proxy out of reach: agent/models/reach.py's line) and no call of it
has answered in this bench.

Every trajectory of such a model fails the same way in seconds: each spent its infra retries at once and ended
infra-failed, left out of the scores for a missing network, and the bench exited as if it had run. Instead the call
ends as a Ctrl-C's does (ModelUnreached, a BenchInterrupted: no infra stop is recorded and no retry spent, only the
error event a stop leaves, and --resume makes the call), the model's trajectories not begun are not begun (one begun
runs: a finished one returns, an unfinished one stops at its next call), and the matrix's other models run on (a
local ollama model still runs on a machine offline); then the bench stops with one line naming the host and --resume
(HostUnreached). A model whose call answered once in this bench keeps the retries: its host went away after it worked
(a blip, a restart).

    watch = ReachWatch()
    model = watch.watch(model, cfg.model)   # the model's calls, watched
    watch.line(cfg.model)                   # why it is not reached, or None
    stopped(reports, run_dir)               # HostUnreached for the reports left unreached, or None
    sentence(line)                          # the line, ended as a sentence
"""
from __future__ import annotations

import shlex
import threading
from pathlib import Path
from typing import Any

from .evaluators import HostUnreached
from .scheduler import BenchInterrupted
from ..models.base import ModelReply, ModelRequest, ModelUnavailable
from ..models.reach import unreachable

UNREACHED = "unreached"  # a trajectory report's stop_reason: it waits for --resume, neither run nor failed


class ModelUnreached(BenchInterrupted):
    """A call of a model the bench never reached: the trajectory stops here, and --resume makes the call."""


class ReachWatch:
    """Which models of the bench answered, and which could not be reached before any did; shared by all threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answered: set[str] = set()
        self._unreached: dict[str, str] = {}  # model -> the line its call said

    def line(self, model: str) -> str | None:
        with self._lock:
            return self._unreached.get(model)

    def watch(self, model: Any, name: str) -> "Watched":
        return Watched(model, name, self)

    def _answer(self, name: str) -> None:
        with self._lock:
            self._answered.add(name)
            self._unreached.pop(name, None)  # reached after all (a first call's blip): its next calls are made

    def _failed(self, name: str, exc: ModelUnavailable) -> str | None:
        """The line, when `exc` says the connection could not open and no call of `name` answered in this bench."""
        line = unreachable(exc)
        with self._lock:
            if line is None or name in self._answered:
                return None
            return self._unreached.setdefault(name, line)


class Watched:
    """A model whose calls the watch sees: none is made once the model is known unreached."""

    def __init__(self, inner: Any, name: str, watch: ReachWatch):
        self.inner, self.model, self.reach = inner, name, watch
        self.name = inner.name

    def query(self, request: ModelRequest) -> ModelReply:
        if (line := self.reach.line(self.model)) is not None:
            raise ModelUnreached(line)
        try:
            reply = self.inner.query(request)
        except ModelUnavailable as exc:
            if (line := self.reach._failed(self.model, exc)) is not None:
                raise ModelUnreached(line) from exc
            raise
        self.reach._answer(self.model)
        return reply

    def __getattr__(self, item: str) -> Any:
        return getattr(self.inner, item)


def sentence(line: str) -> str:
    """reach.py's line as a sentence (it ends on a question, or on none), for a sentence to follow it."""
    return line if line.endswith((".", "?")) else f"{line}."


def stopped(reports: list, run_dir: Path) -> HostUnreached | None:
    """The bench's stop when trajectories of models it never reached are left (their reports' stop_reason UNREACHED):
    one line naming each host's line, the models and --resume; None when there are none."""
    left = [r for r in reports if getattr(r, "stop_reason", "") == UNREACHED]
    if not left:
        return None
    lines: dict[str, list[str]] = {}  # the line -> the models it stopped, in matrix order
    for r in left:
        models = lines.setdefault(r.error, [])
        if r.model not in models:
            models.append(r.model)
    said = " ".join(f"{', '.join(models)}: {sentence(line)}" for line, models in lines.items())
    names = list(dict.fromkeys(m for models in lines.values() for m in models))
    ran = len(reports) - len(left)
    count, verb = ("1 trajectory", "waits") if len(left) == 1 else (f"{len(left)} trajectories", "wait")
    return HostUnreached(f"{said} The bench stopped: {count} of {', '.join(names)} {verb}, not counted as "
                         f"infra-failed{f' (the other {ran} ran)' if ran else ''}; once "
                         f"{'its host' if len(lines) == 1 else 'their hosts'} can be reached, resume with: ptxbench "
                         f"bench --resume --run-dir {shlex.quote(str(run_dir))}")
