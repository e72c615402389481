"""agent/records/manifest.py: the git revision a run's manifest records."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ptxbench.agent.records import manifest
from ptxbench.agent.records.rundir import read_manifest, write_manifest

CHECKOUT = Path(__file__).resolve().parents[2]


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(not shutil.which("git") or not (CHECKOUT / ".git").exists() or manifest.PACKAGE_ROOT != CHECKOUT,
                    reason="needs the tests run from a git checkout whose own package is the one imported")
def test_manifest_in_the_checkout_records_its_revision():
    built = manifest.build_manifest({}, "test", [])
    assert built["git"]["revision"] == _git("rev-parse", "HEAD", cwd=CHECKOUT)
    assert isinstance(built["git"]["dirty"], bool)


@pytest.mark.skipif(not shutil.which("git"), reason="no git")
def test_package_inside_another_repository_records_no_revision(tmp_path, monkeypatch):
    """A wheel installed in a virtual environment inside the user's own repository: that repository's revision says
    nothing of ptxbench's code, so none is recorded."""
    _git("init", "-q", cwd=tmp_path)
    installed = tmp_path / ".venv" / "lib" / "site-packages" / "ptxbench"
    installed.mkdir(parents=True)
    monkeypatch.setattr(manifest, "PACKAGE_ROOT", installed.resolve())
    assert manifest.checkout_root() is None and manifest.git_info() == {}


def test_package_outside_any_repository_records_no_revision(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "PACKAGE_ROOT", tmp_path.resolve())
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert manifest.git_info() == {}


def test_two_optimize_runs_started_together_in_one_folder_take_two_trajectories(tmp_path, monkeypatch):
    """add_to_manifest reads the manifest, picks a free index and writes it back: two `optimize --run-dir DIR` started
    together both read it before either wrote, took index 00, and wrote one trajectory's log and checkpoints both."""
    import threading
    import time

    from ptxbench.agent.loop import optimize as loop
    from ptxbench.agent.loop.state import OptimizeConfig

    built = loop.build_manifest

    def slow(*args, **kwargs):  # the git, package and toolchain look-ups take this long on a loaded machine
        time.sleep(0.5)
        return built(*args, **kwargs)

    monkeypatch.setattr(loop, "build_manifest", slow)
    config = OptimizeConfig(workload="smoke_gemm_bf16_m256_n256_k512", model="builtin/reference", no_gpu=True)
    ids = []
    threads = [threading.Thread(target=lambda: ids.append(loop.add_to_manifest(tmp_path, config)[1])) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(ids) == [config.trajectory_id(), config.model_copy(update={"index": 1}).trajectory_id()]
    recorded = read_manifest(tmp_path)
    assert sorted(recorded["trajectories"]) == sorted(ids) and sorted(recorded["configs"]) == sorted(ids)


def test_a_manifest_write_that_fails_leaves_the_old_one_whole(tmp_path):
    """A full disk (or a kill) mid-write left a cut manifest.json, and every reader (score, report, --resume) refused
    the run as damaged. The disk fills here through a file size limit on a child process."""
    import sys

    write_manifest(tmp_path, {"command": "optimize", "trajectories": ["a"]})
    child = (
        "import resource, signal, sys\n"
        "from ptxbench.agent.records.rundir import write_manifest\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))\n"
        "write_manifest(sys.argv[1], {'command': 'optimize', 'trajectories': ['a', 'b'], 'pad': 'x' * 100_000})\n")
    done = subprocess.run([sys.executable, "-c", child, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "File too large" in done.stderr
    assert read_manifest(tmp_path) == {"command": "optimize", "trajectories": ["a"]}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # nothing half-written left beside it


def test_a_new_trajectory_is_held_before_the_manifest_names_it(tmp_path, monkeypatch):
    """optimize --run-dir wrote the new trajectory into the manifest, then took its hold: a --resume that read the
    manifest in between took the trajectory and ran it, and the run that had just added it was refused."""
    from ptxbench.agent.loop import optimize as loop
    from ptxbench.agent.loop.state import OptimizeConfig

    written, seen = loop.write_manifest, []

    def then_a_resume(run_path, record):  # what a --resume started right after this write finds
        path = written(run_path, record)
        try:
            fd = loop.hold_trajectory(Path(run_path) / "trajectories" / record["trajectories"][-1])
        except loop.RunFolderInUse:
            seen.append("refused")
        else:
            seen.append("held")
            if fd is not None:
                os.close(fd)
        return path

    monkeypatch.setattr(loop, "write_manifest", then_a_resume)
    config = OptimizeConfig(workload="smoke_gemm_bf16_m256_n256_k512", model="builtin/reference", no_gpu=True,
                            turns=1)

    class Stub:
        def evaluate(self, workload_id, source, options):
            raise AssertionError("no evaluation")

        def close(self):
            """Nothing to release."""

    monkeypatch.setattr(loop, "run_trajectory", lambda *args, **kwargs: "ran")
    assert loop.optimize(config, run_dir=tmp_path, evaluator=Stub()) == "ran"
    assert seen == ["refused"]
