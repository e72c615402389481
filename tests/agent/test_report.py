"""Reports from the hand-built run of tests/trajectory_builder.py: files, tables, inline plots, pages."""
from __future__ import annotations

import base64
import json
import re

import pytest

from ptxbench.agent.report import write_report
from ptxbench.agent.scoring import score_runs
from trajectory_builder import build_sample_run


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    run_dir = build_sample_run(tmp_path_factory.mktemp("run") / "sample")
    return run_dir, write_report(run_dir, run_dir / "report")


def test_files_and_leaderboard(report):
    run_dir, files = report
    md = files.markdown.read_text()
    # Leaderboard in PTXBench's layout: a row per model, a column per workload (mean best speedup [CI] (max)).
    assert "| model | attn | gemm |" in md
    assert re.search(r"\| m/a \| – \| 0\.750 \[[0-9.]+, [0-9.]+\] \(max 1\.300\) \|", md)
    assert "| m/b | 0.000 | 1.750 [1.500, 2.000] (max 2.000) |" in md
    assert "8 (1 infra-failed" in md
    # The score saved next to the report is the same as re-scoring the run directory.
    saved = json.loads(files.score_json.read_text())
    again = json.loads(score_runs([run_dir]).model_dump_json())
    assert saved["model_workload"] == again["model_workload"]


def test_html_is_self_contained_with_plots(report):
    _, files = report
    page = files.html.read_text()
    assert "http://" not in page and "https://" not in page and "<script" not in page
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 4  # fast_p curves, speedup by turn, correct vs target, repair heatmap
    for data in images:
        png = base64.b64decode(data)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    for title in ("fast_p curves per model", "speedup by turn", "repair transition heatmap", "correct vs. target executed by turn"):
        assert title in page
    assert "href='trajectories/a-gemm-1.html'" in page


def test_trajectory_pages(report):
    _, files = report
    assert sorted(p.name for p in files.trajectories) == sorted(
        ["a-gemm-0.html", "a-gemm-1.html", "a-gemm-2.html", "a-gemm-3.html", "a-gemm-4.html",
         "b-attn-0.html", "b-gemm-0.html", "b-gemm-terse-0.html"])
    page = next(p for p in files.trajectories if p.name == "a-gemm-1.html").read_text()
    for turn in range(1, 6):
        assert f"id='turn-{turn}'" in page
    # Turn 2's kernel is shown as a diff against turn 1's: one added line.
    assert "<span class='add'>+.reg .b32 r2; // RUNTIME_ERROR</span>" in page
    assert "feedback the model saw" in page and "Turn 2: RUNTIME_ERROR: see the log." in page
    assert "<td class='v-executed'>executed</td>" in page and "candidate" in page
    infra = next(p for p in files.trajectories if p.name == "a-gemm-4.html").read_text()
    assert "infra error in evaluate: GPU worker lost" in infra
    assert "present_not_executed" in infra


def test_without_matplotlib_the_report_is_written_without_plots(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    run = build_sample_run(tmp_path / "run")
    out = tmp_path / "report"
    write_report(run, out)
    page = (out / "index.html").read_text()
    assert "No plots: matplotlib is not installed" in page and "data:image/png" not in page
    assert (out / "summary.md").read_text().count("|") > 20  # the tables are all there
