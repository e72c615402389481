"""`score`, `report` and `score --re-evaluate` name a run by its folder's name however the folder is given: as `.`
from inside it, as `..` from a folder in it, or with a trailing slash. Path('.').name is "" and Path('..').name "..":
every trajectory's `run` in score.json, the report's title and a re-evaluation's folder took those."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli.main import app
from ptxbench.agent.report import write_report
from ptxbench.agent.scoring import score_runs
from trajectory_builder import build_sample_run

GIVEN = [(".", ""), ("..", "trajectories"), ("sample/", None)]  # (the path typed, the folder it is typed from)


@pytest.fixture
def sample(tmp_path):
    return build_sample_run(tmp_path / "sample")


def _typed_from(sample: Path, inside: str | None, monkeypatch) -> None:
    monkeypatch.chdir(sample / inside if inside is not None else sample.parent)


@pytest.mark.parametrize("typed,inside", GIVEN)
def test_score_names_every_trajectorys_run_by_its_folder(sample, typed, inside, monkeypatch):
    _typed_from(sample, inside, monkeypatch)
    assert {t.run for t in score_runs([Path(typed)]).trajectories} == {"sample"}
    printed = CliRunner().invoke(app, ["score", typed, "--json"])
    assert printed.exit_code == 0, printed.output
    assert {t["run"] for t in json.loads(printed.output)["trajectories"]} == {"sample"}


@pytest.mark.parametrize("typed,inside", GIVEN)
def test_report_names_the_run_by_its_folder(sample, typed, inside, monkeypatch, tmp_path):
    _typed_from(sample, inside, monkeypatch)
    files = write_report(Path(typed), tmp_path / "out")
    assert files.markdown.read_text().splitlines()[0] == "# ptxbench report: sample"
    assert "<title>ptxbench report: sample</title>" in files.html.read_text()
    assert "<h1>ptxbench report: sample</h1>" in files.html.read_text()
    assert {t["run"] for t in json.loads(files.score_json.read_text())["trajectories"]} == {"sample"}


def test_a_re_evaluation_of_the_current_folder_is_named_after_it(workdir, monkeypatch):
    """`score . --re-evaluate` from inside the run wrote runs/-reeval-<time>."""
    run = workdir / "example"
    shutil.copytree(Path(__file__).resolve().parents[2] / "docs/examples/optimize-gemm-tuner", run)
    monkeypatch.chdir(run)
    done = CliRunner().invoke(app, ["score", ".", "--re-evaluate", "--no-gpu"])
    assert done.exit_code == 0, done.output
    (new,) = (workdir / "runs").iterdir()
    assert new.name.startswith("example-reeval-")
