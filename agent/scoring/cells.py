"""Scores of a group of trajectories (a model x workload cell, a prompt variant, a GPU, a model).

Two views, as in KernelBench and PTXBench:
- over turns: every scored turn of every trajectory is one kernel (pooled; infra turns dropped);
- over trajectories: a trajectory counts once, by its best turn (infra-failed and unfinished trajectories dropped).
fast_p = share that is correct AND speedup > p (fast_0 = correct, timing or not); target-fast_p
also needs every target instruction family to have executed (unknown counts as not executed).
Only PASSED is correct: COMPILED turns (never run) count in the denominators and in n_compile_only.
Every figure is an Estimate with a 95% interval (stats.py): shares of trajectories Wilson's, the rest a bootstrap
over trajectories.
A group of several workloads (a model's row) scored with `balance="workload"` weighs each workload alike in the
figures over trajectories (a mean over workloads of each one's share or mean, as KernelBench's fast_p is a share
of tasks): pooled, a workload whose trajectories failed infra and were left out, or that ran more trajectories,
tilted the model's figure towards the others. Figures over turns and the repair statistics stay pooled.
Every group holds trajectories of one turn budget (`turn_budget`, run_score.py keys each group by it).
"""
from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field

from .repair import RepairStats, repair_stats
from .stats import Estimate, geomean_estimate, mean_estimate, ratio_estimate, share_estimate
from .turns import TrajectoryScore, TurnScore

P_VALUES = (0.0, 0.5, 0.8, 1.0, 1.2)
WITHIN_TURNS = (1, 4, 8)
ANY = "*"


def is_fast(turn: TurnScore, p: float, target: bool = False) -> bool:
    if not turn.correct or (target and not turn.target_executed):
        return False
    if p == 0:
        return True
    return turn.speedup is not None and turn.speedup > p


def p_key(p: float) -> str:
    return f"{p:g}"


class CellScore(BaseModel):
    model: str = ANY
    workload: str = ANY
    prompt: str = ANY
    gpu: str = ANY
    l2_flush: str = ANY
    turn_budget: int | None = Field(None, description="the turn limit (--turns) its trajectories ran under, None where "
                                    "none is recorded: a cell never pools two budgets (best of 4 turns and best of 16 "
                                    "are different trials)")
    n_trajectories: int = Field(0, description="trajectories scored (infra-failed and unfinished ones excluded)")
    workloads_scored: list[str] = Field(default_factory=list, description="the workloads of those trajectories: what "
                                        "its figures over trajectories cover (a model's row: a workload it never ran, "
                                        "or whose every trajectory was left out, is not among them, so two models' "
                                        "rows compare as like only where these agree)")
    n_infra_failed: int = 0
    n_unfinished: int = Field(0, description="trajectories with no stop recorded (killed or still running), left out "
                              "of the figures over trajectories as the infra-failed ones are")
    n_turns: int = Field(0, description="scored turns (infra turns excluded)")
    n_infra_turns: int = 0
    n_target_unknown: int = Field(0, description="correct turns whose target verdict was not measured")
    n_compile_only: int = Field(0, description="COMPILED turns, never run on a GPU (--no-gpu): correctness unknown, not correct")
    fast_p_turns: dict[str, Estimate] = Field(default_factory=dict)
    target_fast_p_turns: dict[str, Estimate] = Field(default_factory=dict)
    fast_p_trajectories: dict[str, Estimate] = Field(default_factory=dict)
    target_fast_p_trajectories: dict[str, Estimate] = Field(default_factory=dict)
    best_speedup: Estimate = Field(Estimate(), description="mean over trajectories of the best correct speedup (0 when none)")
    best_speedup_max: float | None = Field(None, description="the best correct speedup of any trajectory")
    best_target_speedup: Estimate = Field(Estimate(), description="as best_speedup, counting only target-executed turns")
    geomean_speedup: Estimate = Field(Estimate(), description="geometric mean of the best speedups of trajectories that "
                                      "have one (n of them); those without a correct timed turn are left out, not 0")
    success_within: dict[str, Estimate] = Field(default_factory=dict, description="k -> share with a correct turn at turn <= k")
    target_success_within: dict[str, Estimate] = Field(default_factory=dict)
    turns_to_first_correct: Estimate = Field(Estimate(), description="mean over trajectories that got one")
    mean_best_sol_pct: Estimate = Estimate()
    by_turn: dict[str, list[float | None]] = Field(
        default_factory=dict,
        description="per turn 1..T: correct, target_correct (shares of trajectories reaching that turn), best_so_far (mean over trajectories of the best correct speedup within k turns, 0 when none), reached",
    )
    repair: RepairStats = RepairStats()


def balance_weights(trajs: list[TrajectoryScore], by: str | None) -> tuple[list[float] | None, list[int] | None]:
    """Per trajectory, 1 / (the trajectories of its `by` group) and the group's index (the bootstrap's stratum): each
    group weighs alike. (None, None) without `by`: every trajectory weighs alike."""
    if by is None:
        return None, None
    keys = [getattr(t, by) for t in trajs]
    counts = Counter(keys)
    index = {k: i for i, k in enumerate(sorted(counts))}
    return [1.0 / counts[k] for k in keys], [index[k] for k in keys]


def _weighted_mean(values: list[float], weights: list[float]) -> float | None:
    total = sum(weights)
    return sum(v * w for v, w in zip(values, weights)) / total if total else None


def _by_turn(trajs: list[TrajectoryScore], balance: str | None = None) -> dict[str, list[float | None]]:
    # one pass over each trajectory's turns per k, not a scan of its turns for every k (turn numbers are a record's
    # text: bounded by MAX_TURNS when read, but a run of many trajectories still made this quadratic)
    by_number = [{t.turn: t for t in tr.scored_turns} for tr in trajs]
    weights = balance_weights(trajs, balance)[0] or [1.0] * len(trajs)
    last = max((k for turns in by_number for k in turns), default=0)
    out: dict[str, list[float | None]] = {"correct": [], "target_correct": [], "best_so_far": [], "reached": []}
    best = [0.0] * len(trajs)
    for k in range(1, last + 1):
        at_k = [(turns[k], tr) for turns, tr in zip(by_number, trajs) if k in turns]
        out["reached"].append(float(len(at_k)))
        # the trajectories at turn k weigh each of their workloads alike (not by the workload's trajectories overall:
        # those that stopped at their target before turn k would shrink its weight)
        w_k = balance_weights([tr for _, tr in at_k], balance)[0] or [1.0] * len(at_k)
        out["correct"].append(_weighted_mean([float(t.correct) for t, _ in at_k], w_k))
        out["target_correct"].append(_weighted_mean([float(bool(t.correct and t.target_executed)) for t, _ in at_k], w_k))
        for i, turns in enumerate(by_number):
            t = turns.get(k)
            if t is not None and t.correct and t.speedup is not None:
                best[i] = max(best[i], t.speedup)
        out["best_so_far"].append(_weighted_mean(best, weights))
    return out


def score_cell(trajectories: list[TrajectoryScore], balance: str | None = None, **key) -> CellScore:
    """The cell's figures; `balance` ("workload"): the figures over trajectories weigh each workload alike."""
    kept = [t for t in trajectories if not t.left_out]

    def over(trajs: list[TrajectoryScore]) -> dict:
        # the weights of a subset are its own: a mean over the trajectories that got one weighs those of each workload
        weights, strata = balance_weights(trajs, balance)
        return {} if weights is None else {"weights": weights, "strata": strata}

    def share(outcomes: list[float]) -> Estimate:
        return share_estimate(outcomes, balance_weights(kept, balance)[0])
    cell = CellScore(**key)
    cell.n_trajectories = len(kept)
    cell.workloads_scored = sorted({t.workload for t in kept})
    cell.n_infra_failed = sum(t.infra_failed for t in trajectories)
    cell.n_unfinished = sum(t.unfinished for t in trajectories)
    cell.n_turns = sum(len(t.scored_turns) for t in trajectories)
    cell.n_infra_turns = sum(len(t.turns) - len(t.scored_turns) for t in trajectories)
    cell.n_target_unknown = sum(1 for tr in trajectories for t in tr.scored_turns if t.correct and t.target_executed is None)
    cell.n_compile_only = sum(1 for tr in trajectories for t in tr.scored_turns if t.compile_only)
    for p in P_VALUES:
        k = p_key(p)
        # Over turns: every trajectory (infra-failed and unfinished ones too) contributes its scored turns.
        cell.fast_p_turns[k] = ratio_estimate([sum(is_fast(t, p) for t in tr.scored_turns) for tr in trajectories],
                                              [len(tr.scored_turns) for tr in trajectories], share=True)
        cell.target_fast_p_turns[k] = ratio_estimate([sum(is_fast(t, p, True) for t in tr.scored_turns) for tr in trajectories],
                                                     [len(tr.scored_turns) for tr in trajectories], share=True)
        cell.fast_p_trajectories[k] = share([float(any(is_fast(t, p) for t in tr.scored_turns)) for tr in kept])
        cell.target_fast_p_trajectories[k] = share([float(any(is_fast(t, p, True) for t in tr.scored_turns)) for tr in kept])
    cell.best_speedup = mean_estimate([tr.best_speedup or 0.0 for tr in kept], **over(kept))
    cell.best_speedup_max = max((tr.best_speedup for tr in kept if tr.best_speedup is not None), default=None)
    cell.best_target_speedup = mean_estimate([tr.best_target_speedup or 0.0 for tr in kept], **over(kept))
    # over the trajectories that have a speedup (those with none are left out, not counted as 0: a log has no 0), so
    # its n is theirs, balanced or not; balanced, a workload's weight must not hang on how many of its own failed
    have = [tr for tr in kept if tr.best_speedup is not None and tr.best_speedup > 0]
    cell.geomean_speedup = geomean_estimate([tr.best_speedup for tr in have], **over(have))
    for k in WITHIN_TURNS:
        cell.success_within[str(k)] = share(
            [float(tr.first_correct_turn is not None and tr.first_correct_turn <= k) for tr in kept])
        cell.target_success_within[str(k)] = share(
            [float(tr.first_target_correct_turn is not None and tr.first_target_correct_turn <= k) for tr in kept])
    got_one = [tr for tr in kept if tr.first_correct_turn]
    cell.turns_to_first_correct = mean_estimate([float(tr.first_correct_turn) for tr in got_one], **over(got_one))
    with_sol = [tr for tr in kept if tr.best_sol_pct is not None]
    cell.mean_best_sol_pct = mean_estimate([tr.best_sol_pct for tr in with_sol], **over(with_sol))
    cell.by_turn = _by_turn(kept, balance)
    cell.repair = repair_stats(trajectories)
    return cell
