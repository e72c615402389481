"""Any litellm model string (API providers, or a local vLLM / ollama / OpenAI-compatible server via api_base).

Transient failures (rate limits, timeouts, 5xx, dropped connections) are retried with tenacity and
exponential back-off (not a first connection that cannot open at all, to a destination that never answered in this
process: a machine offline, a proxy out of reach; reach.py says it in one line at once); one that outlasts every retry
is a ModelUnavailable (an infra failure: the trajectory is left
out of the scores and bench asks again), a refused key or unknown model a ModelRefused (infra too, not retried),
anything else a ModelError (the trajectory stops on it). Keys come from the environment only
(litellm reads the provider's variable; `api_key_env` names another one) and never reach a log.
"""
from __future__ import annotations

import functools
import json
import os
import time
from typing import Any, Callable
from urllib.parse import urlsplit

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

from ...tools.redact import scrub_text
from .base import CallStopped, ModelError, ModelRefused, ModelReply, ModelRequest, ModelUnavailable, OutOfTime, utf8_safe
from .reach import answered, cannot_connect, has_answered

# The bundled price table: no network fetch at import time (up to 5 s and a warning offline). litellm reads the
# switch once, while importing, so it is set before the first import; a user's own value stands.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def _litellm():
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def too_large(exc: BaseException) -> bool:
    """A request bigger than the account's per-minute token limit. OpenAI answers it as a 429 ("Request too large for
    ... on tokens per min"), but no wait lets it through: retried as a rate limit it ended as an outage, an infra stop,
    and the request grows with the model's own replies, so a long-winded model could take its trajectory out of the
    scores. It is the conversation's size, as a full context window is; so is any 413 (a proxy's body limit: nginx
    takes 1 MB by default, which a long tools conversation outgrows)."""
    status = getattr(exc, "status_code", None)
    return status == 413 or (status == 429 and "request too large" in str(exc).lower())


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: rate limit, timeout, server error, connection trouble."""
    if too_large(exc) or getattr(exc, "status_code", None) in NOT_SERVED:
        return False
    litellm = _litellm()
    transient = (
        litellm.RateLimitError,
        litellm.Timeout,
        litellm.APIConnectionError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
    )
    if isinstance(exc, transient):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status == 429 or status >= 500)


# A server that does not serve chat completions at --api-base (405 Method Not Allowed, 501 Not Implemented, 505): no
# retry mends it (six attempts took about 70 s before the stop), so it is the set-up's refusal, not an outage.
NOT_SERVED = (405, 501, 505)


# The account's credit is spent: 402 Payment Required (OpenRouter, DeepSeek), or Anthropic's 400 saying so. It was a
# later call's ModelError, the model's: a bench whose credit ran out scored every trajectory in flight as the model's
# error, its turns left unplayed. No model text brings it on and no back-off mends it: a refused set-up at any call
NO_CREDIT_WORDS = ("credit balance is too low",)


def out_of_credit(exc: BaseException) -> bool:
    status = getattr(exc, "status_code", None)
    return status == 402 or (status == 400 and any(words in str(exc).lower() for words in NO_CREDIT_WORDS))


def is_refusal(exc: BaseException) -> bool:
    """The provider refused the set-up, not the request's content: a bad key (401), no access (403), an unknown model
    (404), an endpoint that serves no chat completions (NOT_SERVED), an account out of credit (out_of_credit)."""
    litellm = _litellm()
    if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError)):
        return True
    return getattr(exc, "status_code", None) in (401, 403, 404, *NOT_SERVED) or out_of_credit(exc)


def said(exc: BaseException) -> str:
    """A provider failure in one line: litellm's text for an answer it cannot read carries its own traceback (not
    ours, and on screen it reads as a crash), cut here; line breaks become spaces."""
    text = f"{type(exc).__name__}: {exc}".split("Traceback (most recent call last):")[0]
    return scrub_text(" ".join(text.split()))


# A 403 once the model has answered may refuse what it wrote, not the set-up (OpenRouter answers input its moderation
# flags with 403, and every later request holds the model's replies): the model's error then, as a later 400 is; an
# infra stop would let a model take its own trajectory out of the scores
MODERATED = 403

# A Retry-After longer than this (a daily quota spent) is waited only this long: the attempts then run out as an outage
MAX_RETRY_AFTER_S = 120.0


def _floor(retry_after: float, jitter, state) -> float:
    """The least wait a refusal allows: its Retry-After plus a jitter (none when it asked for no wait)."""
    return retry_after + jitter(state) if retry_after > 0 else 0.0


def retry_after_s(exc: BaseException | None) -> float:
    """The wait a refusal asks for in its Retry-After (or OpenAI's retry-after-ms) header, capped; 0 when it asks none
    (or gives an HTTP date)."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or getattr(exc, "litellm_response_headers", None)
    if not headers:
        return 0.0
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        try:
            seconds = float(headers.get(name)) * scale
        except (TypeError, ValueError):
            continue
        if seconds == seconds:  # not NaN
            return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)
    return 0.0


class _HarnessFailed(Exception):
    """The call's own machinery failed (on_retry: the model_retry event's write on a full disk, a live view's listener;
    the back-off's wait, which the bench's slot bookkeeping replaces).
    Made a ModelError it was the model's error on any call after the first, the trajectory scored on it; query raises
    the failure itself, which the loop records as the harness's crash (infra)."""


class ContextExceeded(ModelError):
    """The request outgrew what the model or its server takes (the context window, a per-request token limit, a body
    size limit): the same call, sent with a smaller context, may fit. A ModelError when the loop cannot trim further.
    `what`: the limit outgrown, in words; `said`: the provider's refusal in one line, keys masked."""

    def __init__(self, what: str, said: str):
        super().__init__(f"the conversation outgrew {what}: {said}")
        self.what, self.said = what, said


# The window a request may fill, as a share of the model's input limit: the estimate below is no tokenizer's count
WINDOW_SHARE = 0.9
# Characters per token of the estimate: code and JSON run near 3.5 to 4 in the common tokenizers; the lower figure
# errs towards trimming a little early over a request the provider refuses
CHARS_PER_TOKEN = 3.5


# Providers whose model window litellm asks a server for, not its bundled table
RUNTIME_INFO_PROVIDERS = ("ollama", "ollama_chat", "lemonade")


def estimated_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
    return int(len(json.dumps([messages, tools or []], ensure_ascii=False)) / CHARS_PER_TOKEN)


class LiteLLMModel:
    def __init__(
        self,
        name: str,
        api_base: str | None = None,
        api_key_env: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_s: float = 600.0,
        max_attempts: int = 6,
        retry_wait_s: float = 2.0,
        extra: dict[str, Any] | None = None,
        on_retry: Callable[[int, int, int, str, float], None] | None = None,
    ):
        self.name = name
        self.api_base = api_base
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.retry_wait_s = retry_wait_s
        self.extra = dict(extra or {})
        self.on_retry = on_retry  # (turn, attempt, max_attempts, reason, wait_s) before each back-off: shown on screen
        # DeepSeek's thinking mode (V4's default, direct or through a router) refuses, with a 400, a conversation whose
        # tool-call messages come back without their reasoning_content; other providers are not sent it
        self.passes_reasoning_back = "deepseek" in name.lower()
        # a back-off's wait: the bench frees its provider slot meanwhile, and raises CallStopped in it when stopping
        self.sleep: Callable[[float], None] = time.sleep

    def _before_sleep(self, turn: int, state) -> None:
        if self.on_retry is not None:
            exc = state.outcome.exception()
            reason = said(exc)
            try:
                self.on_retry(turn, state.attempt_number, self.max_attempts, reason,
                              state.next_action.sleep if state.next_action else 0.0)
            except Exception as failure:  # noqa: BLE001 - passed on as it is by query, never as the provider's
                raise _HarnessFailed() from failure

    def _wait(self, seconds: float) -> None:
        """A back-off's wait (self.sleep: the bench's frees its provider slot); its own failure is the harness's."""
        try:
            self.sleep(seconds)
        except CallStopped:
            raise
        except Exception as failure:  # noqa: BLE001 - passed on as it is by query, never as the provider's
            raise _HarnessFailed() from failure

    @functools.cached_property
    def input_limit(self) -> int | None:
        """The tokens a request may hold, from litellm's model table (its input window less the reply's max_tokens);
        None when litellm does not know the model (a local server's name, a new model). Looked up once per model."""
        litellm, provider = _litellm(), self.name.split("/", 1)[0]
        # the bundled table only: for some providers litellm asks a server (Ollama's /api/show, the default host's,
        # not --api-base's), which a request in the loop must not wait on
        if provider in RUNTIME_INFO_PROVIDERS or not any(
                key in litellm.model_cost for key in (self.name, self.name.split("/", 1)[-1])):
            return None
        try:
            info = litellm.get_model_info(self.name)
        except Exception:  # noqa: BLE001 - unreadable: the provider's own refusal is the check
            return None
        window = info.get("max_input_tokens") or info.get("max_tokens")
        if not isinstance(window, int) or window <= 0:
            return None
        return max(window - (self.max_tokens or 0), window // 4)

    def fits(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> bool | None:
        """Whether a request of these messages fits the model's window, estimated before sending it (the loop then
        trims instead of spending a call on the provider's refusal); None when the window is unknown."""
        limit = self.input_limit
        return None if limit is None else estimated_tokens(messages, tools) <= WINDOW_SHARE * limit

    def _offline(self, exc: BaseException | None, attempt: int) -> str | None:
        """One line when the call's first attempt could not connect at all (reach.py) to a destination that has not
        answered in this process: no retry soon mends a machine offline or a proxy out of reach; None otherwise (a
        failure after an attempt that reached something, or a destination that answered before, may be a blip)."""
        if exc is None or attempt > 1 or has_answered(self._destination):
            return None
        return cannot_connect(exc, urlsplit(self.api_base).hostname if self.api_base else "")

    @property
    def _destination(self) -> str:
        return self.api_base or self.name.split("/", 1)[0]

    def _kwargs(self, request: ModelRequest) -> dict[str, Any]:
        # max_retries=0: the provider client must not retry on its own; tenacity does, and counts attempts.
        kwargs: dict[str, Any] = {"model": self.name, "messages": request.messages, "timeout": self.timeout_s,
                                  "max_retries": 0, "drop_params": True, **self.extra}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            kwargs["api_key"] = key
        elif self.api_base and self.name.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
            kwargs["api_key"] = "EMPTY"  # a local OpenAI-compatible server: the client insists on some key
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        if request.tools:
            kwargs["tools"] = request.tools
            kwargs["tool_choice"] = "auto"
        return kwargs

    def query(self, request: ModelRequest) -> ModelReply:
        from .keys import key_problem

        if problem := key_problem(self.name, self.api_base, self.api_key_env):
            raise ModelRefused(problem)  # no call, no retries: a keyless request would look like a server error
        litellm = _litellm()
        kwargs = self._kwargs(request)
        jitter = wait_random(0, self.retry_wait_s)
        backoff = wait_exponential(multiplier=self.retry_wait_s, max=60.0) + jitter
        # the wall-time budget left bounds the whole call: each attempt's timeout, each back-off, the retries
        deadline = None if request.time_left_s is None else time.monotonic() + max(request.time_left_s, 0.0)
        left = (lambda: float("inf")) if deadline is None else (lambda: deadline - time.monotonic())
        retrying = Retrying(
            before_sleep=lambda state: self._before_sleep(request.turn, state),
            stop=stop_after_attempt(self.max_attempts) | (lambda state: left() <= 0),
            # a provider's Retry-After is a floor: an attempt sooner lands in the same rate-limit window; jittered above
            # it, or every call told the same Retry-After came back at the same instant and met the limit together
            wait=lambda state: min(max(backoff(state), _floor(retry_after_s(state.outcome.exception()), jitter, state)),
                                   max(left(), 0.0)),
            retry=retry_if_exception(is_transient) & (
                lambda state: self._offline(state.outcome.exception(), state.attempt_number) is None),
            sleep=self._wait,
            reraise=True,
        )
        start = time.perf_counter()
        try:
            response = retrying(lambda: litellm.completion(**{**kwargs, "timeout": max(min(self.timeout_s, left()), 1.0)}))
        except CallStopped:
            raise
        except _HarnessFailed as failed:  # the harness's own failure, raised as it is: a crash, never the model's error
            raise failed.__cause__
        except Exception as exc:  # noqa: BLE001 - every provider failure becomes one recorded error
            offline = self._offline(exc, retrying.statistics.get("attempt_number", 1))
            if is_transient(exc) and offline:  # an infra stop in seconds, not after a minute of back-off
                raise ModelUnavailable(scrub_text(offline)) from None
            if is_transient(exc) and left() <= 0:  # cut by the budget, not given up on
                raise OutOfTime(f"the wall-time budget ran out during the model call (attempt "
                                f"{retrying.statistics.get('attempt_number', 1)}): {said(exc)}") from None
            if is_transient(exc):  # still down after every retry: the provider's outage, not the model's answer
                raise ModelUnavailable(said(exc).replace(":", f" after {self.max_attempts} attempts:", 1)) from None
            if is_refusal(exc) and not (request.call_index and getattr(exc, "status_code", None) == MODERATED):
                raise ModelRefused(said(exc)) from None  # the set-up refused: the model never answered
            large = too_large(exc)
            if large or isinstance(exc, litellm.ContextWindowExceededError):  # said first: the stop line keeps 500
                # characters; the loop sends it again trimmed (loop/context.py), and stops on it only when its
                # smallest view does not fit either
                what = ("the model's context window" if not large else "the server's request size limit"
                        if getattr(exc, "status_code", None) == 413 else "the provider's per-request token limit")
                raise ContextExceeded(what, said(exc)) from None
            raise ModelError(said(exc)) from None
        latency = time.perf_counter() - start
        answered(self._destination)  # the network reaches it: a connection failure from now on may be a blip
        attempts = retrying.statistics.get("attempt_number", 1)
        try:
            reply = _reply(litellm, response, latency, attempts)
        except Exception as exc:  # noqa: BLE001 - an answer of a shape no reply can be read from is the server's failure
            raise ModelError(scrub_text(f"the server's answer could not be read: {type(exc).__name__}: {exc}")) from None
        if not any(reply.usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")):
            # a server that counts nothing (litellm reads its missing usage as zeros): a token budget must still hold,
            # and a cost budget too (litellm priced the zeros at $0): the estimate is priced, None when no price is known
            usage = estimated_usage(request.messages, reply)
            reply = reply.model_copy(update={"usage": usage, "cost_usd": estimated_cost(litellm, self.name, usage)})
        return reply


CHARS_PER_TOKEN = 4  # the usual rule of thumb for English and code


def estimated_usage(messages: list[dict[str, Any]], reply: ModelReply) -> dict[str, int]:
    """Token counts from the text, marked estimated=1, for an answer that reported none. The prompt's tool calls
    count too: in tools mode they carry every kernel sent back."""
    prompt = sum(len(str(m.get("content") or "")) + sum(len(str((c.get("function") or {}).get("arguments") or ""))
                                                         for c in m.get("tool_calls") or [] if isinstance(c, dict))
                 for m in messages) // CHARS_PER_TOKEN
    written = len(reply.content) + len(reply.reasoning_content or "") + sum(len(c["function"]["arguments"])
                                                                            for c in reply.tool_calls)
    completion = written // CHARS_PER_TOKEN
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion, "estimated": 1}


def estimated_cost(litellm, model: str, usage: dict[str, int]) -> float | None:
    """The price of estimated token counts, or None when litellm knows no price for the model."""
    try:
        prompt, completion = litellm.cost_per_token(model=model, prompt_tokens=usage["prompt_tokens"],
                                                    completion_tokens=usage["completion_tokens"])
        return ModelReply(cost_usd=prompt + completion).cost_usd  # bounded as any reply's cost
    except Exception:  # noqa: BLE001 - an unmapped model: no cost, as completion_cost says for one
        return None


def _reply(litellm, response, latency: float, attempts: int) -> ModelReply:
    """The answer as a ModelReply. No choice at all (a proxy's content filter sends `"choices": []`) is an empty
    reply: the turn is the model's, a FORMAT_ERROR with nothing to read."""
    choices = getattr(response, "choices", None) or []
    message = choices[0].message if choices else None
    finish = getattr(choices[0], "finish_reason", None) if choices else None
    tool_calls = [_tool_call(tc) for tc in (getattr(message, "tool_calls", None) or [])]
    usage_obj = getattr(response, "usage", None)
    usage = {}
    if usage_obj is not None:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            usage[key] = getattr(usage_obj, key, 0) or 0  # bounded by ModelReply
    try:
        cost = float(litellm.completion_cost(completion_response=response))
    except Exception:  # noqa: BLE001 - unknown prices (local models) mean no cost, not a failure
        cost = None
    return ModelReply(
        # OpenAI's structured refusal sends its text apart, content null: it is the reply's text all the same
        content=getattr(message, "content", None) or _text_or_none(getattr(message, "refusal", None)) or "",
        reasoning_content=getattr(message, "reasoning_content", None) or None,
        tool_calls=tool_calls,
        usage=usage,
        cost_usd=cost,
        latency_s=latency,
        attempts=attempts,
        finish_reason=str(finish) if finish else None,
    )


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _tool_call(tc) -> dict[str, Any]:
    fn = tc.function
    call = {"id": tc.id or "", "type": "function", "function": {"name": fn.name or "", "arguments": fn.arguments or "{}"}}
    # Gemini's thought signature: litellm sends it back from here (the id that also carries it may be replaced). Only
    # that string is kept: any server can fill these fields, and the record takes no nesting or text it cannot write
    fields = getattr(tc, "provider_specific_fields", None)
    signature = fields.get("thought_signature") if isinstance(fields, dict) else None
    if isinstance(signature, str) and signature:
        call["provider_specific_fields"] = {"thought_signature": utf8_safe(signature)}
    return call
