"""A sealed run (`ptxbench seal`: each finished trajectory's log gzipped) reads, scores, exports and replays as it did
live; nothing appends to it; `--undo` gives back the same bytes; a trajectory still running is left live."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli import app
from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
from ptxbench.agent.models.base import ModelRequest
from ptxbench.agent.models.replay import ReplayModel
from ptxbench.agent.records.events import Stop, TurnEnd
from ptxbench.agent.records.rundir import (LOG_NAME, SEALED_LOG_NAME, SealedTrajectory, TrajectoryWriter, load_run,
                                           read_events, trajectory_log)
from ptxbench.agent.records.sealing import seal_run, unseal_run
from ptxbench.agent.scoring import score_runs

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture
def example_run(tmp_path):
    """A copy of the recorded optimize run (four GPU-evaluated turns on the H200) and its log's bytes."""
    run = tmp_path / "run"
    shutil.copytree(EXAMPLES / "optimize-gemm-tuner", run)
    (folder,) = (run / "trajectories").iterdir()
    return run, folder, (folder / LOG_NAME).read_bytes()


def _score(run):
    return score_runs([run]).model_dump(exclude={"runs"})


def test_a_sealed_run_scores_reads_and_replays_as_it_did_live(example_run):
    run, folder, plain = example_run
    live_events, live_score = [e.model_dump() for e in load_run(run)[0].events], _score(run)
    live_reply = ReplayModel(run).query(ModelRequest(messages=[], call_index=1)).content

    sealed, left = seal_run(run)

    assert sealed == [folder] and left == []
    assert not (folder / LOG_NAME).exists() and trajectory_log(folder) == folder / SEALED_LOG_NAME
    assert gzip.decompress((folder / SEALED_LOG_NAME).read_bytes()) == plain
    assert (folder / SEALED_LOG_NAME).stat().st_size < len(plain) / 3
    assert [e.model_dump() for e in load_run(run)[0].events] == live_events
    assert _score(run) == live_score
    assert ReplayModel(run).query(ModelRequest(messages=[], call_index=1)).content == live_reply


def test_the_synth_run_exports_the_same_rows_sealed(tmp_path):
    run = tmp_path / "synth"
    shutil.copytree(EXAMPLES / "synth-repairs" / "run", run)
    config = ExportConfig(recipe="fixit", require_target_executed=False, include_held_out=True)
    live = [r.model_dump() for r in build_rows(collect_samples([run]), config)[0]]
    sealed, _ = seal_run(run)
    assert sealed and [r.model_dump() for r in build_rows(collect_samples([run]), config)[0]] == live


def test_nothing_is_appended_to_a_sealed_trajectory_and_undo_restores_its_bytes(example_run):
    run, folder, plain = example_run
    seal_run(run)
    with pytest.raises(SealedTrajectory, match="--undo"):
        TrajectoryWriter(folder)
    again = (folder / SEALED_LOG_NAME).read_bytes()

    assert unseal_run(run) == [folder]
    assert (folder / LOG_NAME).read_bytes() == plain and not (folder / SEALED_LOG_NAME).exists()
    seal_run(run)
    assert (folder / SEALED_LOG_NAME).read_bytes() == again  # the same log seals to the same bytes


def test_a_trajectory_without_its_stop_event_stays_live(tmp_path):
    writer = TrajectoryWriter(tmp_path / "run" / "trajectories" / "t")
    writer.append(TurnEnd(trajectory_id="t", turn=1))
    assert seal_run(tmp_path / "run") == ([], [writer.folder])
    assert (writer.folder / LOG_NAME).exists() and not (writer.folder / SEALED_LOG_NAME).exists()
    writer.append(Stop(trajectory_id="t", turn=1, reason="turn_limit"))
    assert seal_run(tmp_path / "run") == ([writer.folder], [])


def test_a_sealed_log_cut_short_reads_up_to_where_it_breaks(example_run):
    run, folder, plain = example_run
    seal_run(run)
    packed = (folder / SEALED_LOG_NAME).read_bytes()
    (folder / SEALED_LOG_NAME).write_bytes(packed[: len(packed) // 2])
    events = read_events(folder / SEALED_LOG_NAME)
    assert 0 < len(events) < len(read_events_of(plain, folder.parent.parent.parent / "plain.jsonl"))
    assert events[0].type == "trajectory_start"


def read_events_of(data: bytes, path: Path):
    path.write_bytes(data)
    return read_events(path)


def test_a_kill_between_sealing_and_removing_the_live_log_leaves_the_live_log_in_charge(example_run):
    run, folder, plain = example_run
    seal_run(run)
    (folder / LOG_NAME).write_bytes(plain)  # both present, as a kill after the rename and before the unlink leaves them
    assert trajectory_log(folder) == folder / LOG_NAME
    assert seal_run(run)[0] == [folder] and not (folder / LOG_NAME).exists()


def test_the_cli_seals_refuses_to_resume_a_sealed_run_and_unseals(example_run):
    run, folder, plain = example_run
    runner = CliRunner()
    sealed = runner.invoke(app, ["seal", str(run)])
    assert sealed.exit_code == 0 and "1 trajectories sealed" in sealed.output, sealed.output
    for args in (["optimize", "--resume", str(run), "--no-gpu"], ["bench", "--run-dir", str(run), "--resume"]):
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2, (args, refused.output)
        if args[0] == "optimize":
            assert "the run is sealed" in refused.output and "--undo" in refused.output
        else:  # an optimize run, which no bench continues sealed or not: said as that, not sent to `seal --undo`
            assert "holds an optimize run, not a bench run" in refused.output and "--undo" not in refused.output
        assert "Traceback" not in refused.output
    undone = runner.invoke(app, ["seal", str(run), "--undo"])
    assert undone.exit_code == 0 and (folder / LOG_NAME).read_bytes() == plain
    assert runner.invoke(app, ["seal", str(run.parent / "nowhere")]).exit_code == 2


def test_links_planted_in_a_shared_run_are_replaced_or_left_alone_never_written_through(example_run, tmp_path):
    """The temporary names sealing and unsealing once used, and a trajectory folder that is a link to a folder
    outside the run: the files they point at keep their bytes."""
    run, folder, plain = example_run
    victims = {name: tmp_path / name for name in ("seal_target", "unseal_target")}
    for victim in victims.values():
        victim.write_text("the user's own file\n")
    (folder / (SEALED_LOG_NAME + ".tmp")).symlink_to(victims["seal_target"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / LOG_NAME).write_bytes(plain)
    (run / "trajectories" / "t1").symlink_to(elsewhere)

    assert seal_run(run) == ([folder], [])  # the linked folder is neither sealed nor counted live
    assert (elsewhere / LOG_NAME).read_bytes() == plain and not (elsewhere / SEALED_LOG_NAME).exists()
    (folder / (LOG_NAME + ".tmp")).symlink_to(victims["unseal_target"])
    (elsewhere / SEALED_LOG_NAME).write_bytes(gzip.compress(plain))
    assert unseal_run(run) == [folder]
    assert (folder / LOG_NAME).read_bytes() == plain and (elsewhere / SEALED_LOG_NAME).exists()
    assert all(v.read_text() == "the user's own file\n" for v in victims.values())
