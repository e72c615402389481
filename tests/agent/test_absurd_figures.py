"""A speedup no timing can give (1e308, 1e-300, Infinity, NaN: a hand-edited or foreign log) is read as unmeasured:
the scores stay finite, `score` and `report` print no 300-digit figure and no numpy or matplotlib warning, and both
say what was set aside."""
from __future__ import annotations

import math
import re
import warnings

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli.main import app
from ptxbench.agent.records.rundir import write_manifest
from ptxbench.agent.report import write_report
from ptxbench.agent.scoring import score_runs
from ptxbench.tools.figure_text import figure
from trajectory_builder import TrajectoryBuilder

W = "gemm_bf16_m8192_n7168_k5120"
INFINITY = 7777.0  # written as Infinity into the log (pydantic would write an inf as null)
ABSURD = [1e308, INFINITY, 1e-300]


@pytest.fixture
def run(tmp_path):
    run_dir = tmp_path / "run"
    write_manifest(run_dir, {"command": "bench"})
    for i, speedup in enumerate([*ABSURD, 1.5]):
        builder = TrajectoryBuilder(run_dir, f"t{i}", "m/x", W, index=i)
        builder.turn(1, "PASSED", speedup=speedup, target=True).turn(2, "PASSED", speedup=1e308, target=True).stop()
    log = run_dir / "trajectories" / "t1" / "trajectory.jsonl"
    log.write_text(re.sub(r"7777\.0\b", "Infinity", log.read_text()))  # a hand-edited log
    return run_dir


def _runtime_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("value,text", [(1e308, "1.00e+308"), (-2e9, "-2.00e+09"), (math.inf, "inf"),
                                        (-math.inf, "-inf"), (math.nan, "nan"), (1e-300, "1.00e-300"),
                                        (1.5, "1.500"), (0.0, "0.000"), (123456.7, "123456.700"), (0.004, "0.004")])
def test_a_figure_stays_short_and_names_what_is_no_number(value, text):
    assert figure(value) == text


def test_absurd_speedups_are_unmeasured_and_the_scores_stay_finite(run):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        score = score_runs([run])
    assert not _runtime_warnings(caught)
    (row,) = score.models
    # only t3's 1.5 is a speed; the absurd ones leave their PASSED turns correct (fast_0), with no speed
    assert {t.id: t.best_speedup for t in score.trajectories} == {"t0": None, "t1": None, "t2": None, "t3": 1.5}
    best = row.best_speedup
    assert best.value == pytest.approx(1.5 / 4) and all(math.isfinite(v) for v in (best.ci_low, best.ci_high))
    assert row.fast_p_trajectories["0"].value == 1.0 and row.fast_p_trajectories["1"].value == 0.25
    assert score.n_skipped_lines == 0
    # t0: 1e308 (its %SOL, 5e309, was written as null); t1: Infinity; t2: 1e-300 and its %SOL; every turn 2: 1e308
    assert score.n_figures_set_aside == 1 + 1 + 2 + 4


def test_score_prints_no_long_figure_nor_warning_and_says_what_it_set_aside(run):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, ["score", str(run)])
    assert result.exit_code == 0, result.output
    assert not _runtime_warnings(caught)
    assert not re.search(r"\d{20}", result.output) and not re.search(r"\binf\b", result.output), result.output
    assert "unmeasured: 8 recorded speedups or %SOL are NaN, infinite, not positive or past 1e+09 either way" in \
        result.output and "first run/t0 turn 1: speedup 1.00e+308" in result.output, result.output


def test_report_draws_without_warnings_and_says_what_it_set_aside(run):
    pytest.importorskip("matplotlib", reason="the 'bench' extra (matplotlib) is not installed")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = write_report(run, run / "report")
    assert not _runtime_warnings(caught), _runtime_warnings(caught)
    index = out.html.read_text()
    assert "recorded speeds read as unmeasured" in index and "8 speedups or %SOL" in index
    page = next(p for p in out.trajectories if p.name.startswith("t0-")).read_text()
    assert "speedup 1.00e+308" in page and not re.search(r"\d{20}", page)
