"""A provider under a rate-limit storm, as a bench of many trajectories meets it: the provider's limit on calls in flight
holds through the back-offs (a call backing off gives its slot up and takes one again before its next attempt, so
the woken calls never add up beyond the limit), and every refused call waits at least the Retry-After it was told."""
from __future__ import annotations

import threading
import time

import pytest

from openai_server import ScriptedServer
from ptxbench.agent.bench.scheduler import LimitedModel, ProviderGates
from ptxbench.agent.models.base import ModelRequest

LIMIT = 3
CALLS = 8


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-scripted-server-0000")


def test_a_rate_limit_storm_keeps_the_providers_limit_and_each_call_waits_its_retry_after():
    from ptxbench.agent.models.litellm_model import LiteLLMModel

    lock = threading.Lock()
    seen: dict[str, list[float]] = {}  # model -> when each of its requests came
    busy = {"now": 0, "peak": 0}

    def answer(body):
        with lock:
            times = seen.setdefault(body["model"], [])
            times.append(time.monotonic())
            first = len(times) == 1
            if not first:
                busy["now"] += 1
                busy["peak"] = max(busy["peak"], busy["now"])
        if first:  # every model's first call is refused: the whole provider rate-limited at once
            return {"status": 429, "retry_after": 1}
        time.sleep(0.2)  # the answer being written
        with lock:
            busy["now"] -= 1
        return {"content": "ok"}

    gates = ProviderGates({"openai": LIMIT})
    replies = []
    with ScriptedServer(default=answer) as server:
        def call(i: int) -> None:
            model = LimitedModel(LiteLLMModel(f"openai/m{i}", api_base=server.base_url, max_attempts=3,
                                              retry_wait_s=0.01), gates.gate(f"openai/m{i}"))
            replies.append(model.query(ModelRequest(messages=[{"role": "user", "content": "hi"}])).content)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(CALLS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert replies == ["ok"] * CALLS
    assert busy["peak"] <= LIMIT, busy  # the woken calls queued for the provider's slots
    waits = [times[1] - times[0] for times in seen.values()]
    assert len(waits) == CALLS and min(waits) >= 1.0, waits  # the Retry-After is a floor under each back-off
