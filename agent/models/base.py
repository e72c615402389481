"""The Model protocol: what the graph asks of any model, LLM or built-in.

A model gets a ModelRequest (the messages the context policy chose, the tool schemas in tools
mode, and the outcomes of all earlier turns, which built-in models use instead of reading text)
and returns a ModelReply. Failures the caller should record and stop on raise ModelError.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from .evidence import Evidence


class TurnOutcome(BaseModel):
    """What happened to one earlier turn's submission (kept in the graph state, so it survives resume)."""

    turn: int
    status: str = Field(description="EvalResult status, or FORMAT_ERROR (no kernel file handed in)")
    speedup: float | None = None
    message: str = ""
    source: str = Field("", description="the submitted solution file")
    tags: dict[str, Any] = Field(default_factory=dict, description="what a built-in model attached to its reply")
    evidence: Evidence | None = Field(None, description="what the evaluation said (profile figures when one was "
                                      "taken, timing, resources, problems); None for a turn with no evaluation")


class ModelRequest(BaseModel):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    turn: int = 1
    call_index: int = Field(0, description="model calls already made in this trajectory (replay uses it)")
    history: list[TurnOutcome] = Field(default_factory=list)
    start_source: str = Field("", description="the --start-from kernel (turn 0), if any")


class ModelReply(BaseModel):
    content: str = ""
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI form: id, type, function{name, arguments}")
    usage: dict[str, int] = Field(default_factory=dict)
    cost_usd: float | None = None
    latency_s: float = 0.0
    attempts: int = 1
    tags: dict[str, Any] = Field(default_factory=dict, description="built-in models' bookkeeping (e.g. tuner params)")

    def assistant_message(self) -> dict[str, Any]:
        """The reply as an OpenAI assistant message, to append to the conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        return msg


class ModelError(RuntimeError):
    """The model could not answer (after retries): bad key, unknown model, provider down."""


class ModelExhausted(ModelError):
    """A scripted model (replay) has nothing more to say: the trajectory ends normally."""


@runtime_checkable
class Model(Protocol):
    name: str

    def query(self, request: ModelRequest) -> ModelReply: ...
