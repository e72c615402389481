"""Typed trajectory events: one JSON object per line of trajectory.jsonl, appended and flushed as they happen.

Scoring, reports and export read these alone (through agent/records/rundir.py), so a run recorded on any
machine re-scores anywhere. Add fields with defaults; bump SCHEMA_VERSION when a meaning changes.
"""
from __future__ import annotations

from ptxbench.workloads.arch import DEFAULT_ARCH
import time
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter

from ptxbench.tools.results import EvalResult

SCHEMA_VERSION = 1
# The most turns a trajectory may have: a record naming a turn past it (or before 0) is no event of ours, and is
# dropped when read (a turn number of 10^9 made scoring walk every turn up to it).
MAX_TURNS = 10_000


INTERRUPTED = "interrupted by the user"  # how the error event a Ctrl-C leaves in a trajectory log begins

class _Event(BaseModel):
    schema_version: int = SCHEMA_VERSION
    trajectory_id: str
    seq: int = Field(0, description="position in the file, assigned by the writer")
    turn: int = Field(0, ge=0, le=MAX_TURNS, description="1-based turn; 0 before the first turn")
    ts: float = Field(default_factory=time.time)


class TrajectoryStart(_Event):
    type: Literal["trajectory_start"] = "trajectory_start"
    workload: str
    model: str
    prompt: str
    mode: Literal["pipeline", "tools"]
    arch: str = DEFAULT_ARCH
    index: int = Field(0, description="trajectory number within its (model, workload, prompt) cell")
    config: dict[str, Any] = Field(default_factory=dict)
    held_out: bool = False
    gpu: str = ""


class ModelCall(_Event):
    type: Literal["model_call"] = "model_call"
    model: str
    messages: list[dict[str, Any]] = Field(description="the full request messages, as sent")
    response: dict[str, Any] = Field(description="the assistant message: content, reasoning_content, tool_calls")
    usage: dict[str, int] = Field(default_factory=dict, description="prompt_tokens, completion_tokens, total_tokens")
    cost_usd: float | None = None
    latency_s: float = 0.0
    attempts: int = 1


class ModelRetry(_Event):
    type: Literal["model_retry"] = "model_retry"
    attempt: int = Field(description="the model call attempt that failed, 1-based")
    max_attempts: int
    reason: str = Field(description="the provider's error, keys masked")
    wait_s: float = Field(0.0, description="back-off before the next attempt")


class ContextTrimmed(_Event):
    type: Literal["context_trimmed"] = "context_trimmed"
    view: str = Field(description="the context view sent from now on (loop/context.py): summary, last, or last+stubs "
                      "(older tool exchanges of the last turn and the turn in progress cut to one-line stubs)")
    policy: str = Field("", description="the context policy the run was given (optimize --context)")
    reason: Literal["window_exceeded", "window_estimate"] = Field(
        "window_exceeded", description="the provider refused the larger view (window_exceeded), or the model's known "
        "window would not hold it by the estimate made before sending it (window_estimate)")
    detail: str = Field("", description="the provider's refusal, keys masked")
    messages_before: int = 0
    messages_after: int = 0
    chars_before: int = Field(0, description="characters of the larger view's messages")
    chars_after: int = Field(0, description="characters of the messages sent")


class ToolCall(_Event):
    type: Literal["tool_call"] = "tool_call"
    call_id: str = ""
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolResult(_Event):
    type: Literal["tool_result"] = "tool_result"
    call_id: str = ""
    name: str
    content: str
    ok: bool = True


class EvalEvent(_Event):
    type: Literal["eval_result"] = "eval_result"
    kernel_file: str = Field("", description="path, relative to the trajectory folder, of the evaluated kernel")
    kernel_sha256: str = ""
    language: str = ""
    submission: bool = Field(True, description="a scored submission (pipeline turns, the submit tool); False for tool-mode tests")
    result: EvalResult = Field(description="the evaluation, typed (tools/results.py)")
    feedback: str = Field("", description="the exact text the model was shown about this evaluation")


class TurnEnd(_Event):
    type: Literal["turn_end"] = "turn_end"
    status: str = Field("", description="EvalResult status of the turn's submission, or FORMAT_ERROR (no kernel file handed in)")
    speedup: float | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    elapsed_s: float = 0.0


class Stop(_Event):
    type: Literal["stop"] = "stop"
    reason: Literal["turn_limit", "target_speedup", "token_budget", "cost_budget", "time_budget", "tool_budget", "submitted", "error", "infra_error"]
    detail: str = ""


class ErrorEvent(_Event):
    type: Literal["error"] = "error"
    where: str
    message: str
    traceback: str = ""
    infra: bool = Field(False, description="a failure of the harness or its services, not of the model")
    stop_asked: bool = Field(False, description="the run was stopped, not failed: a Ctrl-C or SIGTERM, the bench "
                             "stopping (another trajectory's storage or GPUs gave out, the model's host never reached); "
                             "--resume goes on from here")


Event = Annotated[
    Union[TrajectoryStart, ModelCall, ModelRetry, ContextTrimmed, ToolCall, ToolResult, EvalEvent, TurnEnd, Stop, ErrorEvent],
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(line: str) -> Event:
    return EVENT_ADAPTER.validate_json(line)
