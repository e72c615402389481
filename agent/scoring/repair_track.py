"""Scores of the repair track (bench --track repair), read from runs/ only.

A repair trajectory starts from a suite task's broken kernel (turn 0, `TrajectoryScore.start`) and has k
model turns. Per trajectory:
- fixed@1: turn 1 PASSED; fixed@k: some turn PASSED;
- turns to fix: the first PASSED turn (over fixed trajectories);
- fixed with the speed kept: some turn PASSED, its target instructions executed (or not measured), and its
  speedup >= SPEED_KEPT x the unbroken kernel's speedup recorded in the task (a slow swap is no repair);
- regression: a PASSED turn followed by a failing one (the fix broke again).
Each is a mean over trajectories with a bootstrap 95% interval, overall, per model, by bug class and by
failure class (the broken kernel's recorded status).
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel, Field

from ..records.rundir import load_run
from .stats import Estimate, mean_estimate
from .turns import TrajectoryScore, score_trajectory

SPEED_KEPT = 0.95


class RepairTrajectory(BaseModel):
    id: str
    model: str
    task: str
    bug_class: str = ""
    failure_class: str = Field("", description="the broken kernel's status (turn 0, else the suite's record)")
    held_out: bool = False
    unbroken_speedup: float | None = None
    fixed_at_1: bool = False
    fixed: bool = False
    turns_to_fix: int | None = None
    speed_kept: bool = False
    regression: bool = False


class RepairCell(BaseModel):
    n: int = 0
    fixed_at_1: Estimate = Estimate()
    fixed_at_k: Estimate = Estimate()
    turns_to_fix: Estimate = Estimate()
    speed_kept: Estimate = Estimate()
    regression_rate: Estimate = Estimate()


class RepairScore(BaseModel):
    trajectories: list[RepairTrajectory] = Field(default_factory=list)
    by_model: dict[str, RepairCell] = Field(default_factory=dict)
    by_model_bug_class: dict[str, dict[str, RepairCell]] = Field(default_factory=dict)
    by_model_failure_class: dict[str, dict[str, RepairCell]] = Field(default_factory=dict)


def _task_record(start_from: str) -> dict:
    path = Path(start_from).parent / "task.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def repair_trajectory(score: TrajectoryScore, config: dict) -> RepairTrajectory:
    task = _task_record(config.get("start_from") or "")
    unbroken = task.get("unbroken_speedup")
    turns = score.scored_turns
    passed = [t for t in turns if t.correct]
    kept = [t for t in passed if t.target_executed is not False and t.speedup is not None and unbroken is not None
            and t.speedup >= SPEED_KEPT * unbroken]
    first = passed[0].turn if passed else None
    regression = any(a.correct and b.failed for a, b in zip(turns, turns[1:]))
    failure = score.start.status if score.start else (task.get("verdict") or {}).get("status", "")
    return RepairTrajectory(id=score.id, model=score.model, task=config["repair_task"], bug_class=task.get("bug_class", ""),
                            failure_class=failure, held_out=bool(task.get("held_out")), unbroken_speedup=unbroken,
                            fixed_at_1=bool(turns) and turns[0].turn == 1 and turns[0].correct, fixed=bool(passed),
                            turns_to_fix=first, speed_kept=bool(kept), regression=regression)


def cell(rows: list[RepairTrajectory]) -> RepairCell:
    fixed = [r for r in rows if r.fixed]
    return RepairCell(n=len(rows), fixed_at_1=mean_estimate([float(r.fixed_at_1) for r in rows]),
                      fixed_at_k=mean_estimate([float(r.fixed) for r in rows]),
                      turns_to_fix=mean_estimate([float(r.turns_to_fix) for r in fixed]),
                      speed_kept=mean_estimate([float(r.speed_kept) for r in rows]),
                      regression_rate=mean_estimate([float(r.regression) for r in rows]))


def _grouped(rows: list[RepairTrajectory], key) -> dict[str, RepairCell]:
    groups: dict[str, list[RepairTrajectory]] = defaultdict(list)
    for r in rows:
        groups[key(r)].append(r)
    return {k: cell(v) for k, v in sorted(groups.items())}


def score_repair_runs(run_dirs: list[Path]) -> RepairScore:
    """Every repair-track trajectory of the runs (others are ignored); infra-failed ones are left out."""
    rows = []
    for run in run_dirs:
        for record in load_run(Path(run)):
            config = (record.start.config or {}) if record.start else {}
            if not config.get("repair_task"):
                continue
            score = score_trajectory(record, str(run))
            if not score.infra_failed:
                rows.append(repair_trajectory(score, config))
    out = RepairScore(trajectories=rows, by_model=_grouped(rows, lambda r: r.model))
    for model in out.by_model:
        mine = [r for r in rows if r.model == model]
        out.by_model_bug_class[model] = _grouped(mine, lambda r: r.bug_class)
        out.by_model_failure_class[model] = _grouped(mine, lambda r: r.failure_class)
    return out


def repair_markdown(score: RepairScore) -> str:
    """The repair page: per model, then by bug class and failure class (95% bootstrap intervals)."""
    head = "| {} | n | fixed@1 | fixed@k | fixed, speed kept | turns to fix | regressions |\n| --- | --- | --- | --- | --- | --- | --- |"

    def row(name: str, c: RepairCell) -> str:
        return (f"| {name} | {c.n} | {c.fixed_at_1.fmt(1, pct=True)} | {c.fixed_at_k.fmt(1, pct=True)} | "
                f"{c.speed_kept.fmt(1, pct=True)} | {c.turns_to_fix.fmt(2)} | {c.regression_rate.fmt(1, pct=True)} |")

    parts = ["## Repair track", f"fixed with the speed kept: PASSED, targets executed when measured, >= {SPEED_KEPT}x "
             "the unbroken kernel's speedup", "", head.format("model"), *[row(m, c) for m, c in score.by_model.items()]]
    for model in score.by_model:
        parts += ["", f"### {model} by bug class", "", head.format("bug class"),
                  *[row(k, c) for k, c in score.by_model_bug_class[model].items()],
                  "", f"### {model} by failure class", "", head.format("failure class"),
                  *[row(k, c) for k, c in score.by_model_failure_class[model].items()]]
    return "\n".join(parts) + "\n"
