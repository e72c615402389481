"""Score one or more run directories: trajectories -> cells -> RunScore (JSON-ready).

Reads runs/ only (agent/records/rundir.py), so runs recorded on other machines merge here: trajectories of
several runs with the same (model, workload, prompt, gpu, L2 flush, turn budget) pool into one cell. Every group
(the cells, a model's workloads, a model's row) is keyed by the turn budget (--turns) too: a trajectory given 4 turns
and one given 16 ran different trials, so their best speedups, fast_p and by-turn curves are never averaged together.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterable

from pydantic import BaseModel, Field

from ..records.rundir import distinct_runs, iter_run, read_manifest, run_name
from .cells import ANY, CellScore, score_cell
from .repair import RepairStats
from .turns import TrajectoryScore, TurnScore, score_trajectory

# 2: COMPILED turns are not correct (version 1 counted a no-GPU PASSED as correct); repair.episodes_unverified
# 3: cells keyed by the L2 flush too (trajectories timed from a written and a read flush no longer pool)
# 4: shares of trajectories take Wilson intervals (never of zero width at 0/n or n/n); no interval from one trajectory;
#    Estimate.ci_method
# 5: a model's row weighs each workload alike in its figures over trajectories (pooled, infra exclusions tilted it)
# 6: a model's row resamples its workloads of one trajectory together (each alone drew itself: no interval width)
#    and its by-turn curves weigh alike the workloads that reached each turn
# 7: an unfinished trajectory (no stop after its last step: killed, or still running) is left out of the figures over
#    trajectories, as an infra-failed one is (its missing turns scored it as a model that never got there); n_unfinished;
#    the loop's error after a trajectory's own stop leaves it finished; turns to repair bootstraps trajectories, not
#    runs; a cell's geomean n counts the trajectories with a speedup; n_unstarted; repair.episodes_cut (a failing run its
#    left-out trajectory ended on, no longer counted open)
# 8: every group keyed by the turn budget too (cells, model_workload, models: CellScore.turn_budget,
#    TrajectoryScore.turn_budget); runs of --turns 4 and 16 pooled into one cell's curves and best speedups
#    Estimate.ci_fixed_strata: a model's interval that holds a workload of one trajectory fixed says so
#    the repair track (score --json's repair_track): a row per turn budget too, each task weighing alike in its rates
# 9: TurnScore.l2_flush (its timing's); the repair track's speed kept compares a fix only with unbroken speedups timed
#    on the same GPU from the same L2 flush (speed_unknown_why), and a suite says its flush (RepairSuite.l2_flush)
# 10: no interval where every bootstrap resample agrees (trajectories of one value: [0, 0] read as certain), as from
#     one trajectory; the repair track's by_model_prompt
# 11: a trajectory a stop cut short (a Ctrl-C or SIGTERM, the bench stopping: ErrorEvent.stop_asked) is unfinished,
#     not infra-failed
# 12: a speedup or %SOL past what a timing can measure (turns.MEASURABLE) is unmeasured, as a NaN or an Infinity is:
#     TurnScore.set_aside, RunScore.n_figures_set_aside
# 13: bootstrap intervals are Hesterberg's expanded percentile intervals (as wide as Student's t: the plain percentile
#     interval held the mean 78% of the time from 5 trajectories), and none from fewer than stats.MIN_BOOTSTRAP (4)
#     trajectories (two or three gave their range, which holds the mean half to three quarters of the time)
# 14: the repair track's intervals are drawn over tasks (a bootstrap resampling tasks, their trajectories together:
#     repeats of one task narrowed them), its fixed@1 / fixed@k also with each bug class alike (*_by_class), held out
#     against in distribution (by_model_held_out), and a fix that is a known correct kernel (the unbroken one, the
#     reference) is fixed_by_swap, no repair
# 15: a tools-mode turn a token, cost or wall-time budget stopped before the model could submit is not scored
#     (TrajectoryScore.cut_turn): a pipeline run, its budgets checked between turns, never had that extra failed turn
SCORE_VERSION = 15


class RunScore(BaseModel):
    score_version: int = SCORE_VERSION
    runs: list[str] = Field(default_factory=list)
    manifests: dict[str, dict] = Field(default_factory=dict, description="run dir -> its manifest, as recorded")
    n_trajectories: int = 0
    n_infra_failed: int = 0
    n_unfinished: int = Field(0, description="trajectories with no stop recorded (killed or still running: resume the "
                              "run), left out of the figures over trajectories")
    n_unstarted: int = Field(0, description="trajectory logs with no readable trajectory_start (empty: killed before "
                             "its first line; or that line unreadable): left out of every score, model and workload unknown")
    n_infra_turns: int = 0
    n_target_unknown: int = 0
    n_compile_only: int = Field(0, description="COMPILED turns, never run on a GPU (--no-gpu runs): not counted as correct")
    n_skipped_lines: int = Field(0, description="lines of the trajectory logs that are no readable event, left out "
                                 "(TrajectoryScore.skipped_lines): the scores lack whatever they held")
    n_figures_set_aside: int = Field(0, description="recorded speedups and %SOL read as unmeasured (NaN, infinite, not "
                                     "positive, or past turns.MEASURABLE: a hand-edited or foreign record, no timing): "
                                     "their turns keep their verdicts, with no speed (TurnScore.set_aside)")
    cells: list[CellScore] = Field(default_factory=list, description="one per (model, workload, prompt, gpu, L2 flush, turn "
                                   "budget): runs timed from the two flushes do not pool (docs/timing-integrity.md)")
    model_workload: list[CellScore] = Field(default_factory=list, description="one per (model, workload, turn budget), "
                                            "prompts and GPUs pooled")
    models: list[CellScore] = Field(default_factory=list, description="one per (model, turn budget) over all its workloads: "
                                    "figures over trajectories weigh each workload alike, figures over turns and repair "
                                    "statistics pool")
    trajectories: list[TrajectoryScore] = Field(default_factory=list)

    @property
    def model_names(self) -> list[str]:
        return sorted({t.model for t in self.trajectories})

    @property
    def workload_names(self) -> list[str]:
        return sorted({t.workload for t in self.trajectories})

    @property
    def turn_budgets(self) -> list[int | None]:
        """The turn budgets its trajectories ran under (None: not recorded), in the groups' order."""
        return sorted({t.turn_budget for t in self.trajectories}, key=budget_order)

    def cell(self, model: str, workload: str, turn_budget: int | None | str = ANY) -> CellScore | None:
        """The (model, workload) cell of `turn_budget`; ANY: the only one (MixedTurnBudgets when there are several)."""
        return _one([c for c in self.model_workload if c.model == model and c.workload == workload], turn_budget,
                    f"{model} x {workload}")

    def repair(self, model: str, turn_budget: int | None | str = ANY) -> RepairStats:
        found = _one([c for c in self.models if c.model == model], turn_budget, model)
        return found.repair if found else RepairStats()


class MixedTurnBudgets(ValueError):
    """A cell asked for without its turn budget, where trajectories ran under several: name the budget."""


def budget_order(budget: int | None) -> tuple:
    """Sort key of turn budgets: ascending, the unrecorded one (None) last."""
    return (budget is None, budget or 0)


def _one(cells: list[CellScore], turn_budget, what: str) -> CellScore | None:
    if turn_budget != ANY:
        return next((c for c in cells if c.turn_budget == turn_budget), None)
    if len(cells) > 1:
        raise MixedTurnBudgets(f"{what} ran under several turn budgets "
                               f"({', '.join(str(c.turn_budget) for c in cells)}): name one")
    return cells[0] if cells else None


def _group(trajs: list[TrajectoryScore], fields: tuple[str, ...], balance: str | None = None) -> list[CellScore]:
    groups: dict[tuple, list[TrajectoryScore]] = defaultdict(list)
    # members in (run, id, start) order: the bootstrap draws by position, so runs named in another order gave other
    # intervals (the start tells apart two runs of one folder name)
    for t in sorted(trajs, key=lambda t: (t.run, t.id, t.started)):
        groups[tuple(getattr(t, f) for f in fields)].append(t)
    # a key may hold None (a turn budget not recorded), which does not sort beside a number
    ordered = sorted(groups.items(), key=lambda kv: tuple(budget_order(v) if f == "turn_budget" else v
                                                         for f, v in zip(fields, kv[0])))
    return [score_cell(members, balance=balance, **dict(zip(fields, key))) for key, members in ordered]


def score_trajectories(trajs: list[TrajectoryScore]) -> RunScore:
    score = RunScore(trajectories=trajs, n_trajectories=len(trajs))
    score.n_infra_failed = sum(t.infra_failed for t in trajs)
    score.n_unfinished = sum(t.unfinished for t in trajs)
    score.n_infra_turns = sum(len(t.turns) - len(t.scored_turns) for t in trajs)
    # each group of one turn budget: a trajectory of 4 turns and one of 16 ran different trials
    score.cells = _group(trajs, ("model", "workload", "prompt", "gpu", "l2_flush", "turn_budget"))
    score.model_workload = _group(trajs, ("model", "workload", "turn_budget"))
    score.models = _group(trajs, ("model", "turn_budget"), balance="workload")
    score.n_target_unknown = sum(c.n_target_unknown for c in score.models)
    score.n_compile_only = sum(c.n_compile_only for c in score.models)
    score.n_skipped_lines = sum(t.skipped_lines for t in trajs)
    score.n_figures_set_aside = sum(len(turn.set_aside) for t in trajs for turn in _all_turns(t))
    return score


class DuplicateTrajectory(ValueError):
    """Two run folders hold one trajectory (one trajectory_start: a run and its copy, under its name or another, or a
    run and its re-evaluation): scoring both counts it twice."""


def unique_records(run_dirs: Iterable[Path], unstarted: list[Path] | None = None):
    """(run folder, record) of every started trajectory of the runs, each run folder read once however often it is
    named; DuplicateTrajectory when two folders give the same trajectory_start (its id and time: a copy keeps them
    whatever its folder is called), which would count one trajectory twice. Two runs of one folder name are two runs.
    `unstarted` (a list) gets the folders of the logs left out for want of a readable trajectory_start."""
    where: dict[tuple, Path] = {}
    for run_dir in distinct_runs(run_dirs):
        for rec in iter_run(run_dir):
            if rec.start is None:  # no model or workload to score it under: left out, and counted where asked
                if unstarted is not None:
                    unstarted.append(rec.folder)
                continue
            # one trajectory is one trajectory_start (its id and time, which a copy keeps); two runs saved under one
            # folder name on two machines hold the matrix's ids too, yet are other trajectories
            # named by their trajectory folders: a copy inside one run read "RUN and RUN both hold ..."
            if (started := ("start", rec.start.trajectory_id, rec.start.ts)) in where:
                raise DuplicateTrajectory(f"{where[started]} and {rec.folder} both hold trajectory {rec.id}, started at "
                                          f"the same moment (one is a copy or a re-evaluation of the other): score one of them")
            where[started] = rec.folder
            yield run_dir, rec


def load_trajectory_scores(run_dirs: Iterable[Path], unstarted: list[Path] | None = None) -> list[TrajectoryScore]:
    """The trajectories of the runs (unique_records: a copied trajectory raises DuplicateTrajectory)."""
    return [score_trajectory(rec, run=run_name(run_dir)) for run_dir, rec in unique_records(run_dirs, unstarted)]


def score_runs(run_dirs: Iterable[Path]) -> RunScore:
    run_dirs = distinct_runs(run_dirs)
    unstarted: list[Path] = []
    score = score_trajectories(load_trajectory_scores(run_dirs, unstarted))
    score.n_unstarted = len(unstarted)
    score.runs = [str(r) for r in run_dirs]
    score.manifests = {str(r): read_manifest(r) for r in run_dirs}
    return score


__all__ = ["ANY", "DuplicateTrajectory", "MixedTurnBudgets", "budget_order", "RunScore", "score_runs", "score_trajectories", "load_trajectory_scores",
           "unique_records"]


def _all_turns(trajectory: TrajectoryScore) -> list[TurnScore]:
    """Its turns, with the --start-from kernel's turn 0 where it has one."""
    return trajectory.turns + ([trajectory.start] if trajectory.start else [])


def first_set_aside(score: RunScore) -> str:
    """The first figure read as unmeasured, and where: '<run>/<trajectory> turn <n>: speedup 1.00e+308' ('' if none)."""
    for t in score.trajectories:
        for turn in _all_turns(t):
            if turn.set_aside:
                return f"{t.run}/{t.id} turn {turn.turn}: {turn.set_aside[0]}"
    return ""
