"""The command's output stream closed early (`ptxbench score RUN | head`): the command ends quietly, as click ends
any command whose reader went away, and never blames the run it was reading."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RUN = ROOT / "docs/examples/optimize-gemm-tuner"


def _closed_stdout(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """argv run with its stdout a pipe whose reader is gone before anything is written: each write is EPIPE."""
    proc = subprocess.Popen([sys.executable, "-m", "ptxbench.agent", *argv], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=os.environ)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, "", err)


@pytest.mark.parametrize("argv", [["score", "{run}"], ["score", "{run}", "--json"], ["seal", "{run}"]],
                         ids=["score", "score --json", "seal"])
def test_a_reader_that_goes_away_is_no_damaged_run(argv, tmp_path):
    run = tmp_path / "run"
    import shutil

    shutil.copytree(EXAMPLE_RUN, run)
    result = _closed_stdout([a.format(run=run) for a in argv], tmp_path)
    assert "Broken pipe" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == "" and result.returncode == 1, (result.returncode, result.stderr)
