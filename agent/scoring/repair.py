"""Repair behaviour: what the model does with a failure on the next turn.

Works on each trajectory's scored turns (infra turns dropped) in order:
- transitions: class at turn t -> class at the next scored turn; fix probability of a failure class =
  the share of its transitions that land on PASSED (bootstrapped over trajectories);
- repair episodes: a maximal run of failing turns; repaired when a PASSED turn ends it, and its
  length is the turns it took (fail at 1, pass at 2 -> 1 turn); keyed by the run's first class; open when its
  trajectory finished failing, cut when its trajectory was left out (infra-failed or unfinished: not the model's); turns to repair
  is the mean over repaired runs, its interval a bootstrap over trajectories (the runs of one move together);
- regressions: PASSED followed by a failure;
- COMPILED (compiled, never run) is a class of its own in the transitions, but neither a pass nor a
  failure: a transition into it is left out of fix probabilities and regression rates, and a failing
  run it ends counts as unverified, not as repaired or open (its outcome is unknown);
- speedup gained per turn after the first correct turn: (best speedup - speedup at the first
  correct turn) / scored turns after it, for trajectories with at least one turn after it;
- target slower: a correct turn whose target instructions executed, yet a correct turn of the
  same trajectory without them (target verdict False, not unknown) was faster.
Every interval draws trajectories, except that the trajectories of one repair-track task (`repair_task`) are drawn
together, as one unit: they start from one broken kernel, so 12 of them are no 12 independent tries.
"""
from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel, Field

from ...tools.results import FORMAT_ERROR, MODEL_FAILURES
from .stats import Estimate, ratio_estimate
from .turns import COMPILED, PASSED, TrajectoryScore, TurnScore

CLASS_ORDER = (PASSED, COMPILED, *MODEL_FAILURES, FORMAT_ERROR)


def order_classes(classes) -> list[str]:
    known = [c for c in CLASS_ORDER if c in classes]
    return known + sorted(c for c in classes if c not in CLASS_ORDER)


class RepairStats(BaseModel):
    classes: list[str] = Field(default_factory=list, description="row/column order of the transition matrix")
    transitions: dict[str, dict[str, int]] = Field(default_factory=dict, description="from class -> to class -> count")
    next_class: dict[str, dict[str, float]] = Field(default_factory=dict, description="transitions, each row normalised")
    fix_probability: dict[str, Estimate] = Field(default_factory=dict, description="failure class -> P(next turn PASSED)")
    turns_to_repair: dict[str, Estimate] = Field(default_factory=dict, description="first class of the failing run (and 'all') -> mean turns")
    episodes_repaired: int = 0
    episodes_unrepaired: int = Field(0, description="failing runs still open when their trajectory finished (the turn "
                                     "limit, a budget): not repaired within its turns")
    episodes_cut: int = Field(0, description="failing runs still open when their trajectory was left out (an unrepaired "
                              "infra failure, unfinished): cut short by no fault of the model, repaired or not unknown")
    episodes_unverified: int = Field(0, description="failing runs ended by a COMPILED turn: fixed or not is unknown")
    regressions: int = 0
    regression_rate: Estimate = Estimate()
    trajectories_with_regression: int = 0
    speedup_gain_per_turn: Estimate = Estimate()
    target_slower: Estimate = Field(Estimate(), description="share of correct target-executed turns beaten by a correct non-target turn")
    target_slower_count: int = 0


def _pairs(turns: list[TurnScore]):
    return zip(turns, turns[1:])


def _episodes(turns: list[TurnScore]):
    """(first class, length, the turn that ended it or None) for each maximal run of failing turns."""
    start = None
    for i, turn in enumerate(turns + [None]):
        failing = turn is not None and turn.failed
        if failing and start is None:
            start = i
        elif not failing and start is not None:
            yield turns[start].status, i - start, turn
            start = None


def _speedup_gain(turns: list[TurnScore]) -> float | None:
    first = next((i for i, t in enumerate(turns) if t.correct), None)
    if first is None or first == len(turns) - 1 or turns[first].speedup is None:
        return None
    best = max(t.speedup for t in turns[first:] if t.correct and t.speedup is not None)
    return (best - turns[first].speedup) / (len(turns) - 1 - first)


def _target_slower(turns: list[TurnScore]) -> tuple[int, int]:
    plain = [t.speedup for t in turns if t.correct and t.target_executed is False and t.speedup is not None]
    target = [t.speedup for t in turns if t.correct and t.target_executed and t.speedup is not None]
    best_plain = max(plain) if plain else None
    slower = sum(1 for s in target if best_plain is not None and s < best_plain)
    return slower, len(target)


def _by_unit(entries: list[tuple[object, float, float]]) -> tuple[list[float], list[float]]:
    """(unit, num, den) entries summed per unit, in first-seen order: the sums a bootstrap over units draws."""
    sums: dict[object, list[float]] = {}
    for unit, num, den in entries:
        pair = sums.setdefault(unit, [0.0, 0.0])
        pair[0] += num
        pair[1] += den
    return [n for n, _ in sums.values()], [d for _, d in sums.values()]


def _unit(traj: TrajectoryScore, position: int) -> object:
    """What the bootstrap draws: a repair-track task (its trajectories together), else the trajectory."""
    return ("task", traj.repair_task) if traj.repair_task else ("trajectory", position)


def repair_stats(trajectories: list[TrajectoryScore]) -> RepairStats:
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    per_traj_fix: dict[str, list[tuple]] = defaultdict(list)  # class -> [(unit, fixed, total)] per trajectory
    # class -> per trajectory (turns summed over its repaired runs, runs): the bootstrap draws trajectories, so the
    # runs of one trajectory move together (drawn one by one, three runs of one trajectory had an interval)
    lengths: dict[str, list[tuple]] = defaultdict(list)
    stats = RepairStats()
    regress_rows, gains, slow_rows = [], [], []
    for position, traj in enumerate(trajectories):
        unit = _unit(traj, position)
        turns = traj.scored_turns
        fixed: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        regress = from_pass = 0
        for a, b in _pairs(turns):
            counts[a.status][b.status] += 1
            if b.compile_only:  # the next verdict is unknown: no evidence of a fix or a regression
                continue
            if a.failed:
                fixed[a.status][0] += b.correct
                fixed[a.status][1] += 1
            elif a.correct:
                from_pass += 1
                regress += b.failed
        for cls, (f, t) in fixed.items():
            per_traj_fix[cls].append((unit, f, t))
        repaired: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for cls, length, ended_by in _episodes(turns):
            if ended_by is None and traj.left_out:  # the harness cut it short (or it is still running)
                stats.episodes_cut += 1
            elif ended_by is None:
                stats.episodes_unrepaired += 1
            elif ended_by.compile_only:
                stats.episodes_unverified += 1
            else:
                for key in (cls, "all"):
                    repaired[key][0] += length
                    repaired[key][1] += 1
                stats.episodes_repaired += 1
        for key, (total, runs) in repaired.items():
            lengths[key].append((unit, total, runs))
        stats.regressions += regress
        stats.trajectories_with_regression += regress > 0
        regress_rows.append((unit, regress, from_pass))
        gain = _speedup_gain(turns)
        if gain is not None:
            gains.append((unit, gain, 1))
        slower, total = _target_slower(turns)
        slow_rows.append((unit, slower, total))
        stats.target_slower_count += slower

    seen = set(counts) | {b for row in counts.values() for b in row}
    stats.classes = order_classes(seen)
    stats.transitions = {a: {b: counts[a][b] for b in stats.classes if counts[a][b]} for a in stats.classes if a in counts}
    stats.next_class = {a: {b: n / sum(row.values()) for b, n in row.items()} for a, row in stats.transitions.items()}
    stats.fix_probability = {cls: ratio_estimate(*_by_unit(rows), share=True) for cls, rows in per_traj_fix.items()}
    stats.fix_probability = {c: stats.fix_probability[c] for c in order_classes(stats.fix_probability)}
    stats.turns_to_repair = {c: ratio_estimate(*_by_unit(lengths[c]))
                             for c in order_classes(set(lengths) - {"all"}) + ["all"] if c in lengths}
    stats.regression_rate = ratio_estimate(*_by_unit(regress_rows), share=True)
    gain_sums, gain_counts = _by_unit(gains)
    stats.speedup_gain_per_turn = ratio_estimate(gain_sums, gain_counts)  # the mean over trajectories
    stats.target_slower = ratio_estimate(*_by_unit(slow_rows), share=True)
    return stats
