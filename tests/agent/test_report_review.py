"""Review of the report: what a leaderboard publisher reads from it, and that it says what its figures rest on."""
from __future__ import annotations

from trajectory_builder import TrajectoryBuilder

from ptxbench.agent.report.tables import leaderboard
from ptxbench.agent.scoring import score_runs


def test_leaderboard_cells_say_how_many_trajectories_they_rest_on(tmp_path):
    """A mean best speedup from one trajectory and one from twelve printed alike: a model ranked on one lucky try read
    as well measured. Each cell says its n."""
    TrajectoryBuilder(tmp_path, "a0", "m/a", "gemm").turn(1, "PASSED", 2.0, True).stop()
    for i, sp in enumerate((1.0, 1.2, 1.4, 1.6)):
        TrajectoryBuilder(tmp_path, f"b{i}", "m/b", "gemm", index=i).turn(1, "PASSED", sp, True).stop()
    rows = {row[0]: row[1] for row in leaderboard(score_runs([tmp_path])).rows}
    assert rows["m/a"] == "2.000 (max 2.000; n=1)"
    assert rows["m/b"].startswith("1.300 [") and rows["m/b"].endswith("(max 1.600; n=4)")
    assert {row[0]: row[1] for row in leaderboard(score_runs([tmp_path]), target=True).rows}["m/a"] == "2.000 (n=1)"


def test_a_cell_whose_trajectories_were_all_left_out_is_not_a_workload_never_run(tmp_path):
    """A workload a model ran whose every trajectory failed infra printed '–', as a workload it never ran: the reader
    could not tell a gap in the run from a model that was not asked."""
    TrajectoryBuilder(tmp_path, "a0", "m/a", "gemm").turn(1, "PASSED", 1.5, True).stop()
    TrajectoryBuilder(tmp_path, "a1", "m/a", "attn").infra(1)
    TrajectoryBuilder(tmp_path, "b0", "m/b", "gemm").turn(1, "PASSED", 1.1, True).stop()
    board = leaderboard(score_runs([tmp_path]))
    assert board.headers == ["model", "attn", "gemm"]
    rows = {row[0]: row[1:] for row in board.rows}
    assert rows["m/a"][0] == "– (0 scored, 1 left out)"
    assert rows["m/b"][0] == "–"  # never ran attn


def test_model_rows_over_different_workloads_are_said_to_differ(tmp_path, monkeypatch):
    """A model's curve in the plots and its repair rows pool its own workloads: a model that ran (or kept, after infra
    failures) only the easy workload drew a better curve than one scored on both, and nothing said so."""
    from ptxbench.agent.report.build import write_report
    from ptxbench.agent.report.tables import repair_table, uneven_workloads

    run = tmp_path / "run"
    TrajectoryBuilder(run, "a0", "m/a", "gemm").turn(1, "PASSED", 1.5, True).stop()
    TrajectoryBuilder(run, "a1", "m/a", "attn").infra(1)  # every attn trajectory of m/a left out
    TrajectoryBuilder(run, "b0", "m/b", "gemm").turn(1, "PASSED", 1.1, True).stop()
    TrajectoryBuilder(run, "b1", "m/b", "attn").turn(1, "COMPILE_ERROR").stop()
    score = score_runs([run])
    note = repair_table(score).note
    assert "".join(uneven_workloads(score)) in note and "m/a: none scored on attn" in note and "m/b:" not in note
    index = write_report(run, tmp_path / "out").html.read_text()
    assert "m/a: none scored on attn" in index.split("<h2>Plots</h2>")[1].split("<figure>")[0]

    import matplotlib.axes

    labels = []
    plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda ax, *a, **kw: (labels.append(kw.get("label")), plot(ax, *a, **kw))[1])
    from ptxbench.agent.report.plots import fast_p_curves

    fast_p_curves(score)
    assert "m/a (n=1, 1 of 2 workloads)" in labels and "m/b (n=2)" in labels

    TrajectoryBuilder(run, "a2", "m/a", "attn", index=1).turn(1, "PASSED", 1.0, True).stop()
    assert uneven_workloads(score_runs([run])) == []  # both rows over both workloads: nothing to say


def test_plots_tell_apart_more_models_than_colours(tmp_path, monkeypatch):
    """Eight colours went round: the ninth model's line was the first's, in colour and style, in every plot."""
    import matplotlib.axes

    from ptxbench.agent.report import plots

    for i in range(10):
        TrajectoryBuilder(tmp_path, f"t{i}", f"m{i}", "gemm").turn(1, "COMPILE_ERROR").turn(2, "PASSED", 1 + i / 10, True).stop()
    score = score_runs([tmp_path])
    drawn = []
    plot = matplotlib.axes.Axes.plot

    def record(ax, *args, **kw):
        lines = plot(ax, *args, **kw)
        drawn.extend(line for line in lines if not line.get_label().startswith("_"))  # the labelled lines
        return lines

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", record)
    for figure in (plots.fast_p_curves, plots.speedup_by_turn, plots.correct_vs_target_by_turn):
        drawn.clear()
        figure(score)
        looks = {(id(line.axes), line.get_color(), line.get_linestyle(), line.get_marker()) for line in drawn}
        assert len(looks) == len(drawn) >= 10, figure.__name__


def test_success_within_more_turns_than_the_budget_is_not_shown(tmp_path):
    """Trajectories given 4 turns read a 'correct ≤8' (their share within 4) beside trajectories given 16: as if both
    had been given 8 turns."""
    from ptxbench.agent.report.tables import success_table

    for i in range(2):
        TrajectoryBuilder(tmp_path, f"s{i}", "m", "gemm", index=i, config={"turns": 4}).turn(1, "COMPILE_ERROR").stop()
        TrajectoryBuilder(tmp_path, f"l{i}", "m", "gemm", index=2 + i, config={"turns": 16}).turn(1, "PASSED", 1.2, True).stop()
    table = success_table(score_runs([tmp_path]).model_workload, split=True)
    rows = {row[1]: row for row in table.rows}  # by turn budget
    assert rows["4"][3:9] == ["0% [0, 66]", "0% [0, 66]", "–", "0% [0, 66]", "0% [0, 66]", "–"]  # ≤1, ≤4, ≤8 twice
    assert rows["16"][5] == "100% [34, 100]" and "given fewer than k turns" in table.note


def test_a_trajectory_page_prints_its_best_speedup_as_the_index_does(tmp_path):
    """The page printed a best speedup of 1/3 as 0.3333333333333333, where the index and the tables print 0.333."""
    from ptxbench.agent.report.build import write_report

    TrajectoryBuilder(tmp_path / "run", "t0", "m", "gemm").turn(1, "PASSED", 1 / 3, True).stop()
    files = write_report(tmp_path / "run", tmp_path / "out")
    page = files.trajectories[0].read_text()
    assert "best speedup 0.333 ·" in page and "0.3333333" not in page.split("<section")[0]


def test_the_over_turns_note_says_when_wilson_stands_in(tmp_path):
    """The note said Wilson's interval stands in only where every resample agrees; it also does below MIN_BOOTSTRAP."""
    from ptxbench.agent.report.tables import fast_p_table

    TrajectoryBuilder(tmp_path, "t0", "m", "gemm").turn(1, "PASSED", 1.5, True).turn(2, "COMPILE_ERROR").stop()
    cells = score_runs([tmp_path]).model_workload
    assert cells[0].fast_p_turns["0"].ci_method == "wilson"
    assert "fewer than 4 trajectories" in fast_p_table(cells, "turns", False).note
