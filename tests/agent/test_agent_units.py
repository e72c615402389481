"""The agent's parts on their own: stop rules, context policies, key scrubbing, tool schemas, the built-in
tuner, replay, prompts. No HTTP and no compiler here (StubEvaluator), so these run in a few seconds."""
from __future__ import annotations

import pytest

from agent_helpers import WORKLOAD, StubEvaluator, events, of_type
from ptxbench import prompts
from ptxbench.agent.loop.budget import check_limits
from ptxbench.agent.loop.context import build_messages
from ptxbench.agent.loop.feedback import NO_GPU_NOTE, render_eval
from ptxbench.agent.models import ModelRequest, TurnOutcome, load_model
from ptxbench.agent.models.builtin import TunerModel
from ptxbench.agent.loop.optimize import optimize
from ptxbench.tools.redact import scrub
from ptxbench.agent.loop.state import OptimizeConfig, initial_state
from ptxbench.agent.loop.task import system_prompt, task_prompt
from ptxbench.agent.loop.toolset import Toolbox
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.results import EvalResult
from ptxbench.workloads.registry import get_workload


def _state_with_turns(n: int):
    state = initial_state("SYS", "TASK")
    for t in range(1, n + 1):
        state["done_turns"].append({"turn": t, "messages": [{"role": "assistant", "content": f"reply {t}"},
                                                            {"role": "user", "content": f"feedback {t}"}],
                                    "outcome": TurnOutcome(turn=t, status="COMPILE_ERROR", message=f"error {t}").model_dump()})
    return state


def test_context_policies():
    state = _state_with_turns(3)
    full = build_messages(state, "full")
    assert [m["content"] for m in full[2:]] == ["reply 1", "feedback 1", "reply 2", "feedback 2", "reply 3", "feedback 3"]
    last = build_messages(state, "last")
    assert [m["content"] for m in last] == ["SYS", "TASK", "reply 3", "feedback 3"]
    summary = build_messages(state, "summary")
    assert len(summary) == 4 and "turn 1: COMPILE_ERROR: error 1" in summary[1]["content"]
    assert "turn 3" not in summary[1]["content"] and summary[2]["content"] == "reply 3"
    with pytest.raises(ValueError, match="full, last, summary"):
        build_messages(state, "everything")


def test_stop_rules():
    config = OptimizeConfig(workload=WORKLOAD, turns=3, target_speedup=1.2, max_tokens=100, max_cost_usd=0.5, max_wall_s=60)
    state = _state_with_turns(1)
    assert check_limits(config, state) is None
    assert check_limits(config, {**state, "best_speedup": 1.25}).reason == "target_speedup"
    assert check_limits(config, _state_with_turns(3)).reason == "turn_limit"
    assert check_limits(config, {**state, "tokens": 100}).reason == "token_budget"
    assert check_limits(config, {**state, "cost_usd": 0.6}).reason == "cost_budget"
    assert check_limits(config, {**state, "elapsed_s": 61.0}).reason == "time_budget"
    tools = config.model_copy(update={"mode": "tools", "max_tool_calls": 4})
    assert check_limits(tools, {**state, "tool_calls": 4}).reason == "tool_budget"


def test_scrub_masks_secrets_not_counts(monkeypatch):
    monkeypatch.setenv("SOME_PROVIDER_API_KEY", "k3y-value-123456789")
    data = {"messages": [{"content": "my key is k3y-value-123456789"}], "usage": {"prompt_tokens": 12},
            "api_key": "whatever", "note": "sk-abcdefghijklmnopqrstuvwxyz0123456789AB"}
    clean = scrub(data)
    assert clean["messages"][0]["content"] == "my key is ***"
    assert clean["usage"] == {"prompt_tokens": 12} and clean["api_key"] == "***" and clean["note"] == "***"


def test_tool_schemas_come_from_signatures_and_docstrings():
    schemas = {s["function"]["name"]: s["function"] for s in Toolbox(None, WORKLOAD, EvalOptions()).schemas()}
    assert list(schemas) == ["compile", "test", "benchmark", "profile", "sanitize", "sass", "submit"]
    assert schemas["submit"]["parameters"]["required"] == ["source"]
    sanitize = schemas["sanitize"]["parameters"]["properties"]
    assert sanitize["tools"]["type"] == "array" and "memcheck" in sanitize["tools"]["description"]
    assert "Ends the turn" in schemas["submit"]["description"]


def test_sanitize_runs_each_named_tool_once_and_refuses_unknown_ones():
    """Each name is one compute-sanitizer run holding a GPU: "memcheck" 1000 times was 1000 runs in one tool call."""
    asked = []

    class Recording:
        def evaluate(self, workload_id, source, options):
            asked.append(options.sanitize)
            return EvalResult(workload=workload_id, status="PASSED")

    box = Toolbox(Recording(), WORKLOAD, EvalOptions())
    box.call("sanitize", {"source": "x", "tools": ["memcheck"] * 1000 + ["racecheck", "memcheck"]})
    assert asked == [["memcheck", "racecheck"]]
    with pytest.raises(ValueError, match="unknown tools") as refused:
        box.call("sanitize", {"source": "x", "tools": ["memcheck", "--log-file=/tmp/x" * 1000]})
    assert len(asked) == 1 and len(str(refused.value)) < 200


def test_tuner_follows_feedback():
    tuner = TunerModel("gemm_bf16_m8192_n7168_k5120")
    first = tuner.query(ModelRequest(messages=[], turn=1))
    assert "default" in first.content and "```cuda" in first.content and "/* ptxbench" in first.content
    start = first.tags["params"]
    passed = TurnOutcome(turn=1, status="PASSED", speedup=0.8, tags=first.tags)
    second = tuner.query(ModelRequest(messages=[], turn=2, history=[passed]))
    moved = {k for k in start if second.tags["params"][k] != start[k]}
    assert len(moved) == 1
    # a resource failure makes the next move shrink a resource parameter of the best point
    failed = TurnOutcome(turn=2, status="COMPILE_ERROR", message="uses too much shared memory", tags=second.tags)
    third = tuner.query(ModelRequest(messages=[], turn=3, history=[passed, failed]))
    (name,) = {k for k in start if third.tags["params"][k] != start[k]}
    assert name in ("stages", "bn", "bm", "bk") and third.tags["params"][name] < start[name]
    assert third.tags["params"] not in (start, second.tags["params"])


def test_registry_lists_names_on_a_miss():
    with pytest.raises(ValueError, match="builtin/tuner"):
        load_model("builtin/nope", WORKLOAD)
    assert load_model("openai/gpt-x", WORKLOAD, api_base="http://127.0.0.1:1/v1").name == "openai/gpt-x"


def test_prompt_variants_and_task():
    workload = get_workload("gemm_bf16_m8192_n7168_k5120")
    texts = {}
    for name in prompts.VARIANTS:
        config = OptimizeConfig(workload=workload.id, prompt=name)
        texts[name] = task_prompt(config, workload)
        assert "[8192, 5120]" in texts[name] and "Solution format" in texts[name] and "$" not in texts[name].split("#")[0]
    assert "Knowledge pack" not in texts["basic"]
    assert "Knowledge pack" in texts["knowledge"] and "Knowledge pack" in texts["expert"]
    assert "How the fastest Hopper kernels" in texts["expert"] and "How the fastest" not in texts["knowledge"]
    for header in ("wgmma.cuh", "tma.cuh", "mbarrier.cuh"):
        assert header in texts["knowledge"] and (prompts.HERE / "include" / "ptxbench" / header).exists()
    tools = system_prompt(OptimizeConfig(workload=workload.id, mode="tools"))
    assert "submit" in tools and "submit" not in system_prompt(OptimizeConfig(workload=workload.id))
    with pytest.raises(KeyError, match="basic, knowledge, expert"):
        prompts.variant("fancy")


def test_no_gpu_note_in_feedback():
    result = EvalResult(workload=WORKLOAD, status="COMPILED", message="compiled cleanly")
    assert NO_GPU_NOTE in render_eval(result, 1, no_gpu=True)
    assert NO_GPU_NOTE not in render_eval(result, 1, no_gpu=False)


def test_target_speedup_stops_and_replay_repeats(tmp_path):
    config = OptimizeConfig(workload=WORKLOAD, turns=5, target_speedup=1.2)
    first = StubEvaluator([0.8, None, 1.3, 0.5])
    outcome = optimize(config, run_dir=tmp_path / "tuned", evaluator=first)
    assert outcome.stop_reason == "target_speedup" and outcome.best_speedup == 1.3 and outcome.best_turn == 3
    assert outcome.statuses == ["PASSED", "COMPILE_ERROR", "PASSED"]
    # replay the recorded replies on a new evaluator: the same kernels, in the same order
    replay = OptimizeConfig(workload=WORKLOAD, model=f"replay/{tmp_path / 'tuned'}", turns=5, target_speedup=None)
    second = StubEvaluator([1.0, 1.0, 1.0, 1.0])
    again = optimize(replay, run_dir=tmp_path / "replayed", evaluator=second)
    assert second.sources == first.sources
    assert again.turns == 3 and again.stop_reason == "turn_limit"
    assert "3 model calls" in of_type(events(tmp_path / "replayed"), "stop")[0].detail


def test_time_budget_stops_before_any_call(tmp_path):
    config = OptimizeConfig(workload=WORKLOAD, max_wall_s=1e-9)  # spent before the first call
    outcome = optimize(config, run_dir=tmp_path / "run", evaluator=StubEvaluator([]))
    assert outcome.stop_reason == "time_budget" and outcome.turns == 0
    assert not of_type(events(tmp_path / "run"), "model_call")


class ToolLoopModel:
    """Asks for a tool every time: first an unknown one, then compile without arguments, then compile."""

    name = "test/tool-loop"

    def __init__(self):
        self.requests = []

    def query(self, request):
        from ptxbench.agent.models import ModelReply

        self.requests.append(request)
        n = len(self.requests)
        name, args = [("foo", "{}"), ("compile", "{}")][n - 1] if n <= 2 else ("compile", '{"source": "x"}')
        return ModelReply(content="", tool_calls=[{"id": f"c{n}", "type": "function",
                                                   "function": {"name": name, "arguments": args}}])


def test_tools_mode_turn_ends_when_its_tool_calls_are_used_up(tmp_path):
    import asyncio

    from ptxbench.agent.loop.optimize import arun_trajectory
    from ptxbench.agent.records.rundir import TrajectoryWriter

    model = ToolLoopModel()
    config = OptimizeConfig(workload=WORKLOAD, mode="tools", turns=2, max_tool_calls_per_turn=3)
    writer = TrajectoryWriter(tmp_path / "traj")
    outcome = asyncio.run(arun_trajectory(config, StubEvaluator([1.0] * 10), writer, model=model))
    assert outcome.statuses == ["FORMAT_ERROR", "FORMAT_ERROR"] and outcome.stop_reason == "turn_limit"
    results = [e for e in writer_events(writer) if e.type == "tool_result"]
    assert "unknown tool 'foo'" in results[0].content and not results[0].ok
    assert results[0].content.startswith("Error: unknown tool")  # the message, not a KeyError's quoted repr
    assert "needs `source`" in results[1].content and results[2].ok
    # the second turn starts with a reminder to submit
    assert "submit" in model.requests[3].messages[-1]["content"] and model.requests[3].messages[-1]["role"] == "user"


def writer_events(writer):
    from ptxbench.agent.records.rundir import read_events

    return read_events(writer.path)


def test_builtin_reference_and_the_tuners_attention_fallback():
    from ptxbench.agent.loop.extract import extract_solution
    from ptxbench.workloads.solutions import attention, attention_backward

    # the wgmma forward and backward where their shape rules hold (D = 64, S = 256)
    for wid, expected in (("smoke_mha_fwd_d64", attention.fast_solution(get_workload("smoke_mha_fwd_d64"))),
                          ("smoke_mha_bwd_d64", attention_backward.reference_backward(get_workload("smoke_mha_bwd_d64")))):
        assert 'kernel = "attn_fwd_wgmma_d64"' in expected if wid.startswith("smoke_mha_fwd") \
            else 'kernel = "attn_bwd_wgmma_d64"' in expected
        for name in ("builtin/reference", "builtin/tuner"):
            answer = load_model(name, wid).query(ModelRequest(messages=[]))
            assert extract_solution(answer.content).source.strip() == expected.strip(), (wid, name)
    gemm = load_model("builtin/reference", WORKLOAD).query(ModelRequest(messages=[]))
    assert "gemm_bf16_tn" in extract_solution(gemm.content).source


def test_timing_flags_reach_the_model_with_their_meaning():
    timing = {"candidate": {"median_ms": 60.0, "ci_low_ms": 59.0, "ci_high_ms": 61.0, "n": 15},
              "baselines": {"cudnn_sdpa": {"median_ms": 2.5, "ci_low_ms": 2.4, "ci_high_ms": 2.6, "n": 15}},
              "primary_baseline": "cudnn_sdpa", "speedup": 0.042, "flags": ["slow_candidate", "reduced_iterations",
                                                                           "some_future_flag"]}
    result = EvalResult.model_validate({"workload": "mha_fwd_d128", "status": "PASSED", "gpu_evaluated": True,
                                        "timing": timing})
    text = render_eval(result, turn=1, no_gpu=False)
    assert "- flag: slow_candidate (over 20x slower than the library, so it was timed with 15 calls only)" in text
    from ptxbench.tools.gpu.timing import SLOW_FACTOR, SLOW_ITERS  # the text states the worker's actual rule
    assert (SLOW_FACTOR, SLOW_ITERS) == (20.0, 15)
    assert "- flag: reduced_iterations (" in text
    assert "- flag: some_future_flag\n" in text + "\n"  # an unknown flag is still shown, bare


def test_a_reply_is_made_safe_to_record_whichever_adapter_built_it():
    from ptxbench.agent.models.base import MAX_TOKENS_COUNT, ModelReply

    r = ModelReply(content="a\ud800b", usage={"prompt_tokens": -5, "completion_tokens": 2**80, "total_tokens": "x",
                                              "cached": float("nan")}, cost_usd=-3.0,
                   tool_calls=[{"id": "c\udfff", "function": {"name": "compile", "arguments": {"source": "k"}}}])
    assert r.content == "a?b" and r.cost_usd == 0.0
    assert r.usage == {"prompt_tokens": 0, "completion_tokens": MAX_TOKENS_COUNT}
    assert r.tool_calls == [{"id": "c?", "function": {"name": "compile", "arguments": '{"source": "k"}'}}]
    assert ModelReply(cost_usd=float("inf")).cost_usd is None and ModelReply(cost_usd=0.25).cost_usd == 0.25
    r.model_dump_json()  # writable as it stands


def test_text_from_a_server_shows_its_control_characters_escaped_on_a_terminal():
    from ptxbench.agent.cli.terminal import terminal_text

    hostile = "bad\x1b]0;PWNED\x07hidden\r\x9b2J"
    shown = terminal_text(hostile)
    assert not any(ord(c) < 32 or 0x7f <= ord(c) <= 0x9f for c in shown)
    assert shown == "bad\\x1b]0;PWNED\\x07hidden\\r\\x9b2J" and terminal_text("a\tb\nc") == "a\tb\nc"
    # bidirectional controls reorder what a terminal shows (Trojan Source): shown as escapes too, other text kept
    trojan = 'if (lane == 0) { /*\u202e } \u2066if (ok)\u2069 \u2067*/ return; }  // \u00e9\u4e2d'
    assert terminal_text(trojan) == 'if (lane == 0) { /*\\u202e } \\u2066if (ok)\\u2069 \\u2067*/ return; }  // \u00e9\u4e2d'


def test_the_task_states_each_tensors_own_bounds_and_the_declared_distributions():
    from ptxbench.agent.loop.state import OptimizeConfig
    from ptxbench.agent.loop.task import task_prompt
    from ptxbench.workloads.registry import get_workload

    def text(wid):
        return task_prompt(OptimizeConfig(workload=wid), get_workload(wid))

    fwd, bwd, gemm = text("mha_fwd_d128"), text("mha_bwd_d128"), text("gemm_bf16_m8192_n7168_k5120")
    assert "LSE is held to its own bounds: atol 0.004, rtol 0.0001, relative Frobenius error 0.0001." in fwd
    assert "held to its own bounds" not in bwd + gemm
    assert "then one more on `spiky` inputs (heavy tails" in bwd and "`spiky`" not in fwd + gemm
