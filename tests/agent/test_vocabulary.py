"""One status vocabulary: a no-kernel turn is FORMAT_ERROR in tables, feedback and old records alike; a
non-kernel block says so; tools mode speaks of submit; an infra-stopped run counts turns as its table does."""
from __future__ import annotations

import json

from agent_helpers import WORKLOAD
from bench_fixtures import NOOP
from ptxbench.agent.cli.cmd_optimize import recorded_turns
from ptxbench.agent.loop.extract import extract_solution
from ptxbench.agent.models.base import ModelReply
from ptxbench.agent.loop.optimize import optimize
from ptxbench.agent.records.rundir import load_run, read_events
from ptxbench.agent.scoring.turns import score_trajectory
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.tools.results import EvalResult

PYTHON_REPLY = "Here is a reference:\n\n```python\nimport torch\nC = A @ B\n```\n"


class Says:
    name = "scripted/says"

    def __init__(self, *contents):
        self.contents = list(contents)

    def query(self, request):
        return ModelReply(content=self.contents.pop(0) if self.contents else "", usage={"total_tokens": 1})


class Evaluator:
    def __init__(self, status="COMPILED"):
        self.status, self.sources = status, []

    def evaluate(self, workload_id, source, options):
        self.sources.append(source)
        return EvalResult(workload=workload_id, status=self.status, message="worker lost" if self.status == "INFRA_ERROR" else "")

    def close(self):
        """Nothing to release."""


def _run(tmp_path, model, evaluator=None, **kw):
    config = OptimizeConfig(workload=WORKLOAD, model="builtin/tuner", no_gpu=True, target_speedup=None, **kw)
    evaluator = evaluator or Evaluator()
    return optimize(config, run_dir=tmp_path / "run", evaluator=evaluator, model=model), evaluator


def test_a_python_block_is_a_format_error_that_says_so_and_is_never_evaluated(tmp_path):
    outcome, evaluator = _run(tmp_path, Says(PYTHON_REPLY), turns=1)
    assert outcome.statuses == ["FORMAT_ERROR"] and evaluator.sources == []
    (record,) = load_run(tmp_path / "run")
    assert not list((record.folder / "kernels").iterdir())  # no turn_01.cu saved for it
    found = extract_solution(PYTHON_REPLY)
    assert "```python block is not a kernel file" in found.error
    # a python block next to a real kernel file does not stand in its way
    assert extract_solution(PYTHON_REPLY + f"\n```ptx\n{NOOP}```\n").ok


def test_feedback_heading_and_table_use_one_word(tmp_path):
    outcome, _ = _run(tmp_path, Says("I would tile it with wgmma.", ""), turns=2)
    (record,) = load_run(tmp_path / "run")
    statuses = [t.status for t in score_trajectory(record).turns]
    calls = [e for e in record.events if e.type == "model_call"]
    feedback = calls[1].messages[-1]["content"]
    assert statuses == outcome.statuses == ["FORMAT_ERROR", "FORMAT_ERROR"]
    assert feedback.startswith("## Turn 1: FORMAT_ERROR") and "NO_SUBMISSION" not in feedback


def test_tools_mode_feedback_speaks_of_submit(tmp_path):
    outcome, _ = _run(tmp_path, Says("Let me think about tiling first."), turns=2, mode="tools")
    (record,) = load_run(tmp_path / "run")
    feedback = [e for e in record.events if e.type == "model_call"][1].messages[-1]["content"]
    assert outcome.statuses[0] == "FORMAT_ERROR"
    assert "submit tool" in feedback and "fenced block" not in feedback and "```" not in feedback


def test_old_no_submission_records_read_as_format_error(tmp_path):
    _run(tmp_path, Says(""), turns=1)
    (record,) = load_run(tmp_path / "run")
    log = record.folder / "trajectory.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for line in lines:
        if line["type"] == "turn_end":
            line["status"] = "NO_SUBMISSION"  # as runs before the shared vocabulary wrote it
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [e.status for e in read_events(log) if e.type == "turn_end"] == ["FORMAT_ERROR"]


def test_an_infra_stopped_run_counts_the_turn_its_table_shows(tmp_path):
    outcome, _ = _run(tmp_path, Says(f"```ptx\n{NOOP}```\n"), Evaluator("INFRA_ERROR"), turns=2)
    (record,) = load_run(tmp_path / "run")
    assert outcome.stop_reason == "infra_error" and outcome.turns == 0  # the loop closed no turn
    assert recorded_turns(outcome) == len(score_trajectory(record).turns) == 1
