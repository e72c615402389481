"""The process's edges: its output stream closed early (`ptxbench score RUN | head`) ends the command quietly, as click
ends any command whose reader went away, never blaming the run it was reading; a Ctrl-C while the command's modules
still load ends with exit status 130, as one during a command does, not with an import's traceback."""
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


# Ctrl-C as `import typer` runs (the first thing the command loads), then the command run as `python -m` runs it
_INTERRUPTED_IMPORT = """
import runpy, sys
class Interrupt:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "typer":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt)
sys.argv = ["ptxbench", "workloads"]
runpy.run_module("ptxbench.agent", run_name="__main__")
"""


def test_ctrl_c_while_the_command_loads_is_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT], cwd=tmp_path, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, env=os.environ, timeout=120)
    assert "Traceback" not in result.stderr and result.returncode == 130, (result.returncode, result.stderr)


def test_the_console_script_is_the_function_that_says_so():
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["ptxbench"] == "ptxbench.agent.cli:main"


def test_a_parquet_export_says_what_it_wrote_with_no_progress_bar(tmp_path):
    """datasets drew a bar per split, with carriage returns, into the command's output (a log file of \\r lines)."""
    from typer.testing import CliRunner

    from export_runs import build_run
    from ptxbench.agent.cli.main import app

    run = build_run(tmp_path)
    result = CliRunner().invoke(app, ["export", str(run), "--recipe", "kernelgen", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0 and (tmp_path / "out" / "train.parquet").is_file(), result.output
    assert "\r" not in result.output and "Creating parquet" not in result.output, result.output
