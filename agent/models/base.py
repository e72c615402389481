"""The Model protocol: what the graph asks of any model, LLM or built-in.

A model gets a ModelRequest (the messages the context policy chose, the tool schemas in tools
mode, and the outcomes of all earlier turns, which built-in models use instead of reading text)
and returns a ModelReply. Failures the caller should record and stop on raise ModelError.
"""
from __future__ import annotations

import json
import math
import uuid
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field, field_validator

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
    time_left_s: float | None = Field(None, description="the trajectory's wall-time budget left (None: no budget): "
                                      "a call, its retries included, ends by then (OutOfTime)")


# A count past 2**53 is no count a provider means (and none a float total or an SQLite integer keeps exactly).
MAX_TOKENS_COUNT = 2**53


def utf8_safe(text: str) -> str:
    """`text` with anything UTF-8 cannot encode (a lone surrogate, valid JSON as "\\ud800") made a '?': such a string
    would fail the first write of the trajectory and take the turn down with it."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def _arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the JSON text the tools parse; an object some servers send is written out, and one
    too deep to write is an empty call the tools then refuse by its missing fields."""
    if isinstance(arguments, str):
        return utf8_safe(arguments)
    try:
        return utf8_safe(json.dumps(arguments))
    except (RecursionError, TypeError, ValueError):
        return "{}"


# OpenAI's limit on a function name: a longer one names no tool, and the history would send it back with every call
MAX_TOOL_NAME = 64

# Provider ids are short ("call_" + 24 characters); a longer one is no id a provider made, and it is sent again with
# every later call
MAX_TOOL_CALL_ID = 128


def _call_ids(calls: list[dict[str, Any]]) -> None:
    """Every tool call an id of its own: the next request answers each by its id, and providers refuse a conversation
    whose ids repeat or are no strings (a number or an object as id also failed the trajectory's first write). A
    missing, empty, repeated, overlong or non-string id gets a fresh one."""
    seen = set()
    for call in calls:
        cid = call.get("id")
        if not isinstance(cid, str) or not cid or len(cid) > MAX_TOOL_CALL_ID or cid in seen:
            call["id"] = cid = f"call_{uuid.uuid4().hex[:24]}"
        seen.add(cid)


class ModelReply(BaseModel):
    """One answer of a model, as the harness records it. Everything in it came from a model or its server, so it is
    made safe to record here, whichever adapter built it: text that UTF-8 cannot encode repaired, tool-call arguments
    kept as text (parsed, with their own limits, only by the tools), token counts between 0 and 2**53 (a negative
    count would undo the budgets), a cost that is finite and not negative."""

    content: str = ""
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI form: id, type, function{name, arguments}")
    usage: dict[str, int] = Field(default_factory=dict)
    cost_usd: float | None = None
    latency_s: float = 0.0
    attempts: int = 1
    finish_reason: str | None = Field(None, description="why the server ended the reply: stop, length (cut at the "
                                      "output token limit), tool_calls, content_filter; None when it did not say")
    tags: dict[str, Any] = Field(default_factory=dict, description="built-in models' bookkeeping (e.g. tuner params)")

    @field_validator("content", mode="before")
    @classmethod
    def _no_text(cls, v: Any) -> Any:
        return "" if v is None else v  # a server's null passed on by an adapter: an empty reply, not a crash

    @field_validator("content", "reasoning_content", "finish_reason")
    @classmethod
    def _text(cls, v: str | None) -> str | None:
        return utf8_safe(v) if isinstance(v, str) else v

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _calls(cls, v: Any) -> Any:
        if not isinstance(v, list):
            return v
        calls = []
        for call in v:
            call = call if isinstance(call, dict) else {}
            fn = call.get("function") if isinstance(call.get("function"), dict) else {}
            calls.append({**{k: utf8_safe(x) if isinstance(x, str) else x for k, x in call.items() if k != "function"},
                          "function": {"name": utf8_safe(str(fn.get("name") or ""))[:MAX_TOOL_NAME],
                                       "arguments": _arguments_text(fn.get("arguments") or "{}")}})
        _call_ids(calls)
        return calls

    @field_validator("usage", mode="before")
    @classmethod
    def _usage(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return {}
        counts = {}
        for key, n in v.items():
            try:
                n = float(n)
            except (TypeError, ValueError):
                continue
            if math.isfinite(n):
                counts[utf8_safe(str(key))] = int(min(max(n, 0.0), MAX_TOKENS_COUNT))
        return counts

    @field_validator("cost_usd", mode="before")
    @classmethod
    def _cost(cls, v: Any) -> Any:
        if v is None:
            return None
        try:
            v = float(v)
        except (TypeError, ValueError):
            return None
        return max(v, 0.0) if math.isfinite(v) else None

    def assistant_message(self, with_reasoning: bool = False) -> dict[str, Any]:
        """The reply as an OpenAI assistant message, to append to the conversation; `with_reasoning` keeps the
        reasoning of a reply that made tool calls (a model whose `passes_reasoning_back` is set needs it)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
            if with_reasoning and self.reasoning_content:
                msg["reasoning_content"] = self.reasoning_content
        return msg


class ModelError(RuntimeError):
    """The model could not answer (after retries): bad key, unknown model, provider down."""


class ModelUnavailable(ModelError):
    """The provider stayed unavailable through every retry (rate limit, timeout, server error, lost connection): an
    outage on the harness's side of the line, not the model's answer. The trajectory stops as an infra failure, so
    it is left out of the scores and `bench` tries the same call again, instead of scoring the outage as the model's."""


class ModelRefused(ModelUnavailable):
    """The provider refused the harness's set-up (a bad or missing key, no access, a model name it does not know): the
    model never answered, so, like an outage, the trajectory stops as an infra failure, left out of the scores and
    resumable once the set-up is fixed. Not retried: no back-off mends it."""


class OutOfTime(ModelError):
    """The call was still unanswered, or still being retried, when the trajectory's wall-time budget ran out: the
    budget's stop, neither the model's error nor an outage (a 600 s timeout, six times, overran a budget by an hour)."""


class CallStopped(RuntimeError):
    """Raised by a model's back-off wait when its caller is stopping (the bench's Ctrl-C): the call ends there, with
    no further attempt, and passes through the model as it is (it is no provider failure)."""


class ModelExhausted(ModelError):
    """A scripted model (replay) has nothing more to say: the trajectory ends normally."""


@runtime_checkable
class Model(Protocol):
    name: str

    def query(self, request: ModelRequest) -> ModelReply: ...
