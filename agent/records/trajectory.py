"""Typed, flushed trajectory events for one trajectory (through rundir.TrajectoryWriter), secrets masked.

Each method writes one event of agent/records/events.py as it happens; `listeners` (e.g. the live view of
`ptxbench optimize`) see every event after it is on disk.
"""
from __future__ import annotations

import traceback as tb
from pathlib import Path
from typing import Any, Callable

from .events import (ContextTrimmed, ErrorEvent, EvalEvent, ModelCall, ModelRetry, Stop, ToolCall, ToolResult,
                     TrajectoryStart, TurnEnd, _Event)
from ..models.base import ModelReply
from ...tools.redact import scrub
from ...tools.results import EvalResult
from .rundir import TrajectoryWriter, sha256_text

Listener = Callable[[_Event], None]


class TrajectoryLog:
    def __init__(self, writer: TrajectoryWriter | Path, trajectory_id: str, listeners: list[Listener] | None = None):
        self.writer = writer if isinstance(writer, TrajectoryWriter) else TrajectoryWriter(Path(writer))
        self.trajectory_id = trajectory_id
        self.listeners = list(listeners or [])

    @property
    def folder(self) -> Path:
        return self.writer.folder

    def _emit(self, event: _Event) -> _Event:
        event = type(event).model_validate(scrub(event.model_dump()))
        self.writer.append(event)
        for listener in self.listeners:
            listener(event)
        return event

    def start(self, config: dict[str, Any], **fields: Any) -> _Event:
        return self._emit(TrajectoryStart(trajectory_id=self.trajectory_id, config=config, **fields))

    def model_call(self, turn: int, model: str, messages: list[dict], reply: ModelReply) -> _Event:
        response = {"role": "assistant", "content": reply.content, "reasoning_content": reply.reasoning_content,
                    "tool_calls": reply.tool_calls}
        if reply.finish_reason:  # "length": the server cut the reply, which then reads as malformed
            response["finish_reason"] = reply.finish_reason
        if reply.tags:
            response["tags"] = reply.tags
        return self._emit(ModelCall(trajectory_id=self.trajectory_id, turn=turn, model=model, messages=messages,
                                    response=response, usage=reply.usage, cost_usd=reply.cost_usd,
                                    latency_s=reply.latency_s, attempts=reply.attempts))

    def model_retry(self, turn: int, attempt: int, max_attempts: int, reason: str, wait_s: float) -> _Event:
        return self._emit(ModelRetry(trajectory_id=self.trajectory_id, turn=turn, attempt=attempt,
                                     max_attempts=max_attempts, reason=reason[:300], wait_s=round(wait_s, 1)))

    def context_trimmed(self, turn: int, **fields: Any) -> _Event:
        """The conversation sent smaller from now on (loop/graph.py: the provider refused it, or the model's window
        would not hold it); `fields` are ContextTrimmed's."""
        return self._emit(ContextTrimmed(trajectory_id=self.trajectory_id, turn=turn, **fields))

    def tool_call(self, turn: int, call_id: str, name: str, arguments: dict[str, Any]) -> _Event:
        return self._emit(ToolCall(trajectory_id=self.trajectory_id, turn=turn, call_id=call_id, name=name, arguments=arguments))

    def tool_result(self, turn: int, call_id: str, name: str, content: str, ok: bool = True) -> _Event:
        return self._emit(ToolResult(trajectory_id=self.trajectory_id, turn=turn, call_id=call_id, name=name,
                                     content=content, ok=ok))

    def save_kernel(self, turn: int, language: str, source: str, tag: str = "") -> str:
        return self.writer.save_kernel(turn, language, source, tag)

    def eval_result(self, turn: int, result: EvalResult, feedback: str, kernel_file: str, source: str,
                    language: str, submission: bool = True) -> _Event:
        return self._emit(EvalEvent(trajectory_id=self.trajectory_id, turn=turn, kernel_file=kernel_file,
                                    kernel_sha256=sha256_text(source), language=language, submission=submission,
                                    result=result, feedback=feedback))

    def turn_end(self, turn: int, status: str, speedup: float | None, tokens: int, cost_usd: float, elapsed_s: float) -> _Event:
        return self._emit(TurnEnd(trajectory_id=self.trajectory_id, turn=turn, status=status, speedup=speedup,
                                  tokens=tokens, cost_usd=cost_usd, elapsed_s=elapsed_s))

    def stop(self, turn: int, reason: str, detail: str = "") -> _Event:
        return self._emit(Stop(trajectory_id=self.trajectory_id, turn=turn, reason=reason, detail=detail))

    def error(self, turn: int, where: str, exc: BaseException | str, infra: bool = False,
              stop_asked: bool = False) -> _Event:
        message = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        trace = "" if isinstance(exc, str) else "".join(tb.format_exception(exc))
        return self._emit(ErrorEvent(trajectory_id=self.trajectory_id, turn=turn, where=where, message=message,
                                     traceback=trace, infra=infra, stop_asked=stop_asked))
