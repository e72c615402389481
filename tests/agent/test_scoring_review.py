"""Review of the score's statistics: intervals that hold their stated 95%, and what the figures rest on."""
from __future__ import annotations

import math

import numpy as np

from ptxbench.agent.scoring.stats import MIN_BOOTSTRAP, geomean_estimate, mean_estimate, ratio_estimate


def _coverage(n: int, replicates: int = 300) -> float:
    """How often mean_estimate's interval holds the true mean of skewed, speedup-like draws (lognormal, sigma 0.5)."""
    rng = np.random.default_rng(7)
    truth = math.exp(0.125)
    hits = 0
    for _ in range(replicates):
        est = mean_estimate(list(rng.lognormal(0.0, 0.5, size=n)))
        hits += est.ci_low is not None and est.ci_low <= truth <= est.ci_high
    return hits / replicates


def test_bootstrap_interval_from_few_trajectories_holds_about_95_percent():
    """The plain percentile bootstrap is as narrow as a z interval with the deviation over n: on these skewed draws its
    "95%" interval held the mean 78% of the time from 5 trajectories, 85% from 12. The expanded percentile interval,
    as wide as t's, holds it 86% and 91% of the time (skew keeps even t's below 95%)."""
    assert _coverage(5) >= 0.83
    assert _coverage(12) >= 0.89


def test_no_bootstrap_interval_below_min_trajectories():
    """Two or three trajectories: every resample lies between their extremes, which hold the mean half to three
    quarters of the time; no interval is claimed, as from one trajectory."""
    assert MIN_BOOTSTRAP == 4
    for values in ([1.0, 3.0], [1.0, 2.0, 4.0]):
        est = mean_estimate(values)
        assert est.value is not None and (est.ci_low, est.ci_high, est.ci_method) == (None, None, "")
        assert geomean_estimate(values).ci_low is None
    assert mean_estimate([1.0, 2.0, 3.0, 4.0]).ci_method == "bootstrap"
    # a share over turns falls back to Wilson's over its trajectories, wide as three trajectories are
    share = ratio_estimate([1, 2, 0], [2, 2, 2], share=True)
    assert share.ci_method == "wilson" and share.ci_low < 0.2 and share.ci_high > 0.85


def test_score_counts_the_same_infra_failures_in_its_excluded_and_last_lines(tmp_path):
    """A log whose trajectory_start line is unreadable is not scored (its model and workload unknown) and is said
    apart; its infra stop was still counted in the 'excluded:' line, which then said 1 infra-failed trajectory where
    the last line said 0."""
    from trajectory_builder import TrajectoryBuilder
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    run = tmp_path / "run"
    TrajectoryBuilder(run, "ok", "m", "gemm").turn(1, "PASSED", 1.2, True).stop()
    TrajectoryBuilder(run, "cut", "m", "gemm", index=1).turn(1, "COMPILE_ERROR").infra(2)
    log = run / "trajectories" / "cut" / "trajectory.jsonl"
    log.write_text("{not json\n" + "".join(log.read_text().splitlines(True)[1:]))
    out = CliRunner().invoke(app, ["score", str(run)]).output
    assert "(0 infra-failed, left out), 1 trajectory logs with no readable start" in out
    assert "excluded:" not in out


def test_a_models_row_names_the_workloads_its_figures_cover(tmp_path):
    """score --json's model rows weigh each of the model's workloads alike, over its own workloads: a model that ran
    only the easy one (or lost every trajectory of the hard one to infra) read better, and nothing in the row said
    what it covered."""
    from trajectory_builder import TrajectoryBuilder

    from ptxbench.agent.scoring import score_runs

    TrajectoryBuilder(tmp_path, "a0", "m/a", "gemm").turn(1, "PASSED", 1.5, True).stop()
    TrajectoryBuilder(tmp_path, "a1", "m/a", "attn").infra(1)
    TrajectoryBuilder(tmp_path, "b0", "m/b", "gemm").turn(1, "PASSED", 1.1, True).stop()
    TrajectoryBuilder(tmp_path, "b1", "m/b", "attn").turn(1, "COMPILE_ERROR").stop()
    rows = {row.model: row for row in score_runs([tmp_path]).models}
    assert rows["m/a"].workloads_scored == ["gemm"] and rows["m/b"].workloads_scored == ["attn", "gemm"]
