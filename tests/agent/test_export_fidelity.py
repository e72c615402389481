"""Export rows against what the model really read and wrote: trajectories made by the real agent loop (a scripted
OpenAI-compatible server through litellm, a stub evaluator giving the verdicts), each row compared with the
trajectory log's model_call events."""
from __future__ import annotations

import pytest

from agent_helpers import GOOD_PTX, events, of_type
from openai_server import ScriptedServer
from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
from ptxbench.agent.export.collect import TOOLS_HEADING
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.tools.results import EvalResult, RuntimeTarget, Timing, TimingStat

WORKLOAD = "gemm_bf16_m8192_n7168_k5120"  # not held out: its rows go to train


def source(value: int) -> str:
    """A solution file that differs in code (not only a comment: the dedup hash ignores comments)."""
    return GOOD_PTX.replace("    ret;\n", f"    mov.b32 %r1, {value};\n    ret;\n", 1)


def reply(value: int, note: str = "Here is my kernel.") -> dict:
    return {"content": f"{note}\n\n```ptx\n{source(value)}```\n"}


class VerdictEvaluator:
    """The verdicts in turn: a status, and for PASSED a speedup with the target executed."""

    def __init__(self, verdicts: list[tuple[str, float | None]], note: str = ""):
        self.verdicts, self.note = list(verdicts), note  # the note: what this evaluation's log says besides

    def evaluate(self, workload_id, source, options):
        status, speedup = self.verdicts.pop(0)
        timing, targets = None, {}
        if speedup is not None:
            stat = TimingStat(median_ms=1 / speedup, ci_low_ms=1 / speedup, ci_high_ms=1 / speedup, n=10)
            timing = Timing(candidate=stat, primary_baseline="cublas", speedup=speedup,
                            baselines={"cublas": TimingStat(median_ms=1.0, ci_low_ms=1.0, ci_high_ms=1.0, n=10)})
            targets = {"wgmma": RuntimeTarget(verdict="executed", executed_warp_insts=8)}
        return EvalResult(workload=workload_id, status=status, message=f"{status}.{self.note}", timing=timing,
                          targets_runtime=targets, gpu_evaluated=True)

    def close(self):
        """Nothing to release."""


def run_loop(tmp_path, script: list[dict], verdicts: list[tuple[str, float | None]], **overrides):
    with ScriptedServer(script) as server:
        config = OptimizeConfig(workload=WORKLOAD, model="openai/scripted", api_base=server.base_url,
                                retry_wait_s=0.01, target_speedup=0, turns=len(script), **overrides)
        optimize(config, run_dir=tmp_path / "run", evaluator=VerdictEvaluator(verdicts))
    return tmp_path / "run"


def calls_by_turn(run) -> dict[int, object]:
    """The last model call of each turn: the one whose reply the turn's verdict scored."""
    return {call.turn: call for call in of_type(events(run), "model_call")}


def assert_prompt_was_read(row, calls) -> None:
    """The row's prompt is what the completion's model call read: its system prompt and task, the wrong kernel just
    before the feedback, and that feedback exactly (a tool result in tools mode, a user message otherwise)."""
    seen = calls[row.provenance.turn].messages
    system = seen[0]["content"]
    if TOOLS_HEADING in system:  # a tools-mode system prompt is exported without its tools part (dataset-schema.md)
        system = system[:system.rfind(TOOLS_HEADING)].rstrip("\n") + "\n"
    assert [m.content for m in row.prompt[:2]] == [system, seen[1]["content"]]
    if row.recipe == "fixit":
        assert row.prompt[-1].content == seen[-1]["content"]
        wrong = seen[-2]
        said = wrong["content"] + "".join(c["function"]["arguments"] for c in wrong.get("tool_calls") or [])
        assert source(row.provenance.source_turn).splitlines()[-3].strip() in said


@pytest.mark.parametrize("context", ["full", "last"])
def test_a_fixit_row_pairs_a_failed_turn_with_the_reply_that_read_its_feedback(tmp_path, context):
    """Turn 1 failed, turn 2 held no code block (FORMAT_ERROR), turn 3 passed: turn 3's reply answered the format
    error's feedback (under context "last" the model no longer saw turn 1 at all). A row of turn 1's kernel and log
    -> turn 3's kernel put a prompt before the completion that its model call never read. Turns 4 -> 5 do pair."""
    script = [reply(1), {"content": "I will think about the tiling first."}, reply(3), reply(4), reply(5)]
    verdicts = [("INCORRECT_NUMERICAL", None), ("PASSED", 1.2), ("INCORRECT_NUMERICAL", None), ("PASSED", 1.5)]
    run = run_loop(tmp_path, script, verdicts, context=context)
    rows, _ = build_rows(collect_samples([run]), ExportConfig(recipe="fixit"))
    assert [(r.provenance.source_turn, r.provenance.turn) for r in rows] == [(4, 5)]
    calls = calls_by_turn(run)
    for row in rows:
        assert_prompt_was_read(row, calls)


def test_a_failure_whose_next_turn_held_no_kernel_gives_no_fixit_row_and_says_why(tmp_path):
    script = [reply(1), {"content": "Let me reconsider."}, reply(3)]
    run = run_loop(tmp_path, script, [("COMPILE_ERROR", None), ("PASSED", 1.1)])
    rows, stats = build_rows(collect_samples([run]), ExportConfig(recipe="fixit"))
    assert rows == [] and stats == {"trajectories_without_rows.turn_between": 1, "rows": 0}


@pytest.mark.parametrize("regressed", [True, False])
def test_a_re_evaluated_run_pairs_a_failure_only_with_the_log_that_told_it(tmp_path, regressed):
    """`score --re-evaluate` records each kernel's new verdict and keeps the feedback the model read. A kernel that
    passed when the model ran (its log: "## Turn 1: PASSED") and failed on the re-evaluation made a Fixit row whose
    failure_class said INCORRECT_NUMERICAL beside a log saying it passed: the completion was the model's next attempt
    at speed, taught as the fix of a failure it was never told of. Where the verdicts agree the row stays."""
    from ptxbench.agent.bench.reevaluate import reevaluate_run

    first = ("PASSED", 1.0) if regressed else ("INCORRECT_NUMERICAL", None)
    run = run_loop(tmp_path, [reply(1), reply(2)], [first, ("PASSED", 1.3)])
    again = reevaluate_run(run, tmp_path / "again", evaluator=VerdictEvaluator([("INCORRECT_NUMERICAL", None),
                                                                                ("PASSED", 1.3)]))
    rows, stats = build_rows(collect_samples([again]), ExportConfig(recipe="fixit"))
    told = collect_samples([again])[0].turns[0].feedback
    assert told.startswith("## Turn 1: PASSED" if regressed else "## Turn 1: INCORRECT_NUMERICAL")
    if regressed:
        assert rows == [] and stats == {"trajectories_without_rows.feedback_of_another_verdict": 1, "rows": 0}
    else:
        assert [(r.failure_class, r.prompt[-1].content) for r in rows] == [("INCORRECT_NUMERICAL", told)]
        assert_prompt_was_read(rows[0], calls_by_turn(again))


def replay(tmp_path, name: str, source, verdicts, note: str):
    config = OptimizeConfig(workload=WORKLOAD, model=f"replay/{source}", target_speedup=0, turns=2)
    optimize(config, run_dir=tmp_path / name, evaluator=VerdictEvaluator(verdicts, note))
    return tmp_path / name


def eval_feedback(run, turn: int) -> str:
    return next(e.feedback for e in of_type(events(run), "eval_result") if e.turn == turn)


def test_a_replayed_run_exports_the_feedback_its_replies_answered(tmp_path):
    """replay/<log> resubmits the recorded replies whatever this run's evaluations say: the reply of turn 2 answered
    the recorded run's log of turn 1, not the replay's (another GPU: other numbers, or another verdict). A Fixit row
    of the replay put the replay's log before it; it now holds the log the replies' author read (through a replay of
    a replay too), and a replay whose recorded log cannot be read gives no Fixit row (feedback_unknown)."""
    run = run_loop(tmp_path, [reply(1), reply(2)], [("INCORRECT_NUMERICAL", None), ("PASSED", 1.3)])
    told = eval_feedback(run, 1)
    once = replay(tmp_path, "once", run, [("INCORRECT_NUMERICAL", None), ("PASSED", 1.1)], " max abs err 4.5 on the H100")
    twice = replay(tmp_path, "twice", once, [("INCORRECT_NUMERICAL", None), ("PASSED", 1.2)], " max abs err 7 elsewhere")
    assert told != eval_feedback(once, 1) != eval_feedback(twice, 1)
    authored = calls_by_turn(run)
    for again, speedup in ((once, 1.1), (twice, 1.2)):
        (row,) = build_rows(collect_samples([again]), ExportConfig(recipe="fixit"))[0]
        assert row.prompt[-1].content == told and row.speedup == speedup  # the author's log; this run's verdict
        assert_prompt_was_read(row, authored)
    # a replay's verdict unlike the one its author was told: the row's log and failure class would disagree
    other = replay(tmp_path, "other", run, [("RUNTIME_ERROR", None), ("PASSED", 1.0)], "")
    rows, stats = build_rows(collect_samples([other]), ExportConfig(recipe="fixit"))
    assert rows == [] and stats["trajectories_without_rows.feedback_of_another_verdict"] == 1
    # the recorded log gone: what the replies answered is unknown
    import shutil

    shutil.rmtree(run)
    rows, stats = build_rows(collect_samples([once]), ExportConfig(recipe="fixit"))
    assert rows == [] and stats["trajectories_without_rows.feedback_unknown"] == 1


def submit(value: int, note: str = "") -> dict:
    return {"content": note, "tool_calls": [{"name": "submit", "arguments": {"source": source(value)}}]}


@pytest.mark.parametrize("mode", ["pipeline", "tools"])
def test_every_row_is_its_turns_reply_and_verdict_and_holds_no_reasoning(tmp_path, mode):
    """Each completion is the kernel its turn's model call replied (its reasoning, and a tools-mode reply's tool calls,
    left out), labelled with that turn's verdict, not a neighbour's; a Fixit row's log is the one the fix's call read
    last (a tool result in tools mode)."""
    answer = reply if mode == "pipeline" else submit
    script = [{**answer(1), "reasoning_content": "SECRET-THOUGHT-1"}, answer(2), answer(3),
              {**answer(4), "reasoning_content": "SECRET-THOUGHT-4"}]
    verdicts = [("INCORRECT_NUMERICAL", None), ("PASSED", 1.2), ("RUNTIME_ERROR", None), ("PASSED", 1.7)]
    run = run_loop(tmp_path, script, verdicts, mode=mode)
    calls = calls_by_turn(run)
    evaluated = {e.turn: e for e in of_type(events(run), "eval_result")}
    for recipe, expected in (("kernelgen", [2, 4]), ("fixit", [2, 4])):
        rows, _ = build_rows(collect_samples([run]), ExportConfig(recipe=recipe))
        assert [r.provenance.turn for r in rows] == expected
        for row in rows:
            turn = row.provenance.turn
            assert_prompt_was_read(row, calls)
            said = calls[turn].response
            written = said["content"] + "".join(c["function"]["arguments"] for c in said.get("tool_calls") or [])
            assert f"mov.b32 %r1, {turn};" in row.completion[0].content and f"%r1, {turn};" in written
            assert row.speedup == evaluated[turn].result.speedup and row.target_executed is True
            assert "SECRET-THOUGHT" not in str(row.model_dump())
            if recipe == "fixit":
                assert row.failure_class == evaluated[turn - 1].result.status
                assert row.prompt[-1].content == evaluated[turn - 1].feedback


def test_a_no_gpu_run_re_evaluated_on_a_gpu_gives_no_fixit_row_of_a_failure_the_model_was_not_told(tmp_path):
    """The usual re-evaluation: a --no-gpu run (every turn told "COMPILED (not run on a GPU: correctness and speed
    unknown)"), then `score --re-evaluate` on a GPU. A kernel that now fails was never a failure the model read about:
    no Fixit row pairs it with the next turn; its passing kernels stay KernelGen rows, labelled by the new verdicts."""
    from ptxbench.agent.bench.reevaluate import reevaluate_run

    run = run_loop(tmp_path, [reply(1), reply(2)], [("COMPILED", None), ("COMPILED", None)], no_gpu=True)
    again = reevaluate_run(run, tmp_path / "again", evaluator=VerdictEvaluator([("INCORRECT_NUMERICAL", None),
                                                                                ("PASSED", 1.3)]))
    assert collect_samples([again])[0].turns[0].feedback.startswith("## Turn 1: COMPILED (not run on a GPU")
    rows, stats = build_rows(collect_samples([again]), ExportConfig(recipe="fixit"))
    assert rows == [] and stats == {"trajectories_without_rows.feedback_of_another_verdict": 1, "rows": 0}
    (row,), _ = build_rows(collect_samples([again]), ExportConfig(recipe="kernelgen"))
    assert (row.provenance.turn, row.speedup) == (2, 1.3)


def test_a_replay_finds_its_recorded_log_as_the_replay_named_it_and_takes_only_the_one_holding_its_replies(
        tmp_path, monkeypatch):
    """The replay named its log relative to the folder it ran in (replay/runs/rec); the export runs elsewhere, after the
    recorded run was sealed (trajectory.jsonl.gz). A log at that path holding other replies (a run made again there,
    or a foreign record naming someone's log) lends nothing: the feedback is unknown."""
    import shutil

    from ptxbench.agent.records.sealing import seal_run

    (tmp_path / "runs").mkdir()
    rec = run_loop(tmp_path / "runs", [reply(1), reply(2)], [("INCORRECT_NUMERICAL", None), ("PASSED", 1.3)])
    told = eval_feedback(rec, 1)
    monkeypatch.chdir(tmp_path)
    once = replay(tmp_path / "runs", "once", "runs/run", [("INCORRECT_NUMERICAL", None), ("PASSED", 1.1)], " new GPU")
    seal_run(rec)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    (row,) = build_rows(collect_samples([once]), ExportConfig(recipe="fixit"))[0]
    assert row.prompt[-1].content == told
    (folder,) = (rec / "trajectories").iterdir()
    shutil.rmtree(rec)
    other = run_loop(tmp_path / "runs", [reply(1, "Other words."), reply(2, "Other words.")],
                     [("INCORRECT_NUMERICAL", None), ("PASSED", 1.3)], prompt="basic")
    (made,) = (other / "trajectories").iterdir()
    made.rename(folder)  # another run's log where the recorded one was: its task is another prompt variant's
    rows, stats = build_rows(collect_samples([once]), ExportConfig(recipe="fixit"))
    assert rows == [] and stats["trajectories_without_rows.feedback_unknown"] == 1
    (row,), _ = build_rows(collect_samples([once]), ExportConfig(recipe="kernelgen"))
    assert row.prompt[1].content == calls_by_turn(once)[1].messages[1]["content"] != made_task(folder)


def made_task(folder) -> str:
    from ptxbench.agent.records.rundir import read_events, trajectory_log

    return next(e for e in read_events(trajectory_log(folder)) if e.type == "model_call").messages[1]["content"]
