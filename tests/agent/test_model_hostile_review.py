"""The litellm adapter's sorting of failures into the model's and the harness's (agent/models/litellm_model.py,
reach.py): a failure no model text brings on must never end a trajectory as the model's error, which scores it. A
real OpenAI-compatible server on 127.0.0.1 (tests/openai_server.py) through the real litellm path; nothing leaves
this machine."""
from __future__ import annotations

import errno
import socket

import pytest

from agent_helpers import GOOD_PTX, WORKLOAD, StubEvaluator, events, of_type, offline_without_proxies, reply
from openai_server import ScriptedServer
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.agent.models.base import ModelRequest, ModelUnavailable
from ptxbench.agent.models.litellm_model import LiteLLMModel, _litellm

HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def _no_proxy_and_a_key(monkeypatch):
    offline_without_proxies(monkeypatch)
    _litellm()


@pytest.mark.parametrize("answer", [
    {"status": 402, "message": "Insufficient credits. Add more using https://openrouter.ai/settings/credits"},
    {"status": 400, "message": "Your credit balance is too low to access the Anthropic API. Please go to Plans & "
                               "Billing to upgrade or purchase credits."},
])
def test_an_account_out_of_credit_is_a_refused_set_up_at_any_call(tmp_path, answer):
    """The credit ran out mid-run (OpenRouter and DeepSeek answer 402, Anthropic a 400 saying so): a later call's
    failure was the model's error, so a bench whose account ran dry scored every trajectory in flight on it, turns
    unplayed. It is the set-up's refusal: an infra stop, not retried, resumable once the account is topped up."""
    with ScriptedServer([reply(GOOD_PTX)], default=answer) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url, no_gpu=True,
                                retry_wait_s=0.01, turns=3)
        outcome = optimize(config, run_dir=tmp_path / "run", evaluator=StubEvaluator([1.0] * 5))
    assert outcome.stop_reason == "infra_error" and outcome.statuses == ["PASSED"] and len(server.requests) == 2
    (error,) = of_type(events(tmp_path / "run"), "error")
    assert error.infra and "credit" in error.message.lower()


def _full_disk(*args):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("part", ["on_retry", "sleep"])
def test_a_failing_back_off_report_or_wait_is_the_harness_crash_not_the_models_error(part):
    """The back-off's report (on_retry: the model_retry event, written to disk and shown by the live view) or its wait
    (the bench's, which hands its provider slot back meanwhile) failed: the failure came out of the call as a
    ModelError, which after the first call ends the trajectory as the model's error and scores it. It is raised as it
    is, a crash of the harness (the loop records it as infra)."""
    with ScriptedServer([{"status": 503}], default={"content": "hello"}) as server:
        model = LiteLLMModel("openai/m", api_base=server.base_url, max_attempts=3, retry_wait_s=0.01)
        setattr(model, part, _full_disk)
        with pytest.raises(OSError) as raised:
            model.query(ModelRequest(messages=HELLO, turn=2, call_index=3))
    assert raised.value.errno == errno.ENOSPC and len(server.requests) == 1


def test_a_host_with_no_route_stops_at_once_naming_it(monkeypatch):
    """An --api-base machine on the network that is off or gone answers no ARP: "No route to host" (EHOSTUNREACH).
    Only "network is unreachable" was known, so it was retried as an outage for a minute of back-off, where reach.py's
    rule (a destination that never answered, a connection that could not open) stops it in one line."""
    def no_route(*args, **kwargs):
        raise OSError(errno.EHOSTUNREACH, "No route to host")

    monkeypatch.setattr(socket, "create_connection", no_route)  # httpcore opens its connections through it
    retries: list = []
    model = LiteLLMModel("openai/m", api_base="http://192.0.2.7:8000/v1", max_attempts=3, retry_wait_s=0.01,
                         on_retry=lambda *args: retries.append(args))
    with pytest.raises(ModelUnavailable) as stopped:
        model.query(ModelRequest(messages=HELLO, turn=1))
    assert str(stopped.value).startswith("cannot reach 192.0.2.7 (no route to host"), str(stopped.value)
    assert "not retried" in str(stopped.value) and not retries


def test_a_teacher_out_of_credit_stops_the_export_pass_and_caches_no_failure(tmp_path):
    """export --teacher: a 402 was a request's own failure, so each remaining row got an error entry in the cache and
    went without reasoning; a rerun once the account was topped up read those entries back and never asked again.
    Out of credit is a refused set-up: the pass stops (as on a bad key), nothing cached, and a rerun asks."""
    from export_runs import build_run
    from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
    from ptxbench.agent.export.teacher import add_reasoning

    rows, _ = build_rows(collect_samples([build_run(tmp_path)]), ExportConfig(recipe="fixit"))
    cache = tmp_path / "cache"
    with ScriptedServer([{"status": 402, "message": "Insufficient Balance"}]) as server:
        with pytest.raises(ModelUnavailable):
            add_reasoning(rows, "openai/teacher", cache, api_base=server.base_url)
    assert not list(cache.glob("*.json"))
