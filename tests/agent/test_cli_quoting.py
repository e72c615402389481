"""The commands ptxbench tells the user to run next (the --resume after a Ctrl-C, the seal --undo, the compile a
profile with no GPU points to) name their paths quoted for a shell: a run folder with a space in it, copied from the
line as printed, named two arguments."""
from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
W = "smoke_gemm_bf16_m256_n256_k512"


def _words_after(text: str, lead: str) -> list[str]:
    """The command in `text` from `lead` on (to its closing backtick, if quoted in one), as a shell splits it."""
    tail = text[text.index(lead):].splitlines()[0]
    return shlex.split(tail.split("`")[0])


@pytest.fixture
def spaced(tmp_path):
    return tmp_path / "my runs" / "run 1"


def test_the_resume_after_a_ctrl_c_on_optimize_quotes_the_run_folder(spaced):
    from ptxbench.agent.cli.cmd_optimize import interrupted_line

    spaced.mkdir(parents=True)
    (spaced / "manifest.json").write_text("{}")
    line = interrupted_line(spaced, 3, 8)
    assert _words_after(line, "ptxbench") == ["ptxbench", "optimize", "--resume", str(spaced)], line


def test_the_resume_after_a_ctrl_c_on_bench_quotes_the_run_folder(spaced, capsys):
    import typer

    from ptxbench.agent.cli.cmd_bench import _interrupted

    with pytest.raises(typer.Exit):
        _interrupted(KeyboardInterrupt(), "(no trajectory finished)", spaced, recorded=True)
    err = capsys.readouterr().err
    assert _words_after(err, "ptxbench") == ["ptxbench", "bench", "--resume", "--run-dir", str(spaced)], err


def test_a_sealed_run_names_its_undo_quoted(spaced):
    shutil.copytree(ROOT / "docs/examples/optimize-gemm-tuner", spaced)
    assert CliRunner().invoke(app, ["seal", str(spaced)]).exit_code == 0
    result = CliRunner().invoke(app, ["optimize", "--resume", str(spaced), "--no-gpu"])
    assert result.exit_code == 2, result.output
    assert _words_after(result.output, "ptxbench seal") == ["ptxbench", "seal", str(spaced), "--undo"], result.output


def test_a_run_of_the_other_command_names_its_resume_quoted(spaced, tmp_path):
    shutil.copytree(ROOT / "docs/examples/optimize-gemm-tuner", spaced)
    result = CliRunner().invoke(app, ["bench", "--resume", "--run-dir", str(spaced)])
    assert result.exit_code == 2, result.output
    assert _words_after(result.output, "ptxbench optimize") == ["ptxbench", "optimize", "--resume", str(spaced)], \
        result.output
    bench = tmp_path / "a bench"
    bench.mkdir()
    (bench / "manifest.json").write_text(json.dumps({"manifest_version": 1, "command": "bench", "trajectories": []}))
    result = CliRunner().invoke(app, ["optimize", "--resume", str(bench)])
    assert result.exit_code == 2, result.output
    assert _words_after(result.output, "ptxbench bench") == ["ptxbench", "bench", "--resume", "--run-dir", str(bench)], \
        result.output


def test_profile_without_a_gpu_names_the_compile_quoted(tmp_path, monkeypatch):
    monkeypatch.setattr("ptxbench.agent.cli.preflight.no_gpu_reason", lambda: "no NVIDIA driver on this machine")
    kernel = tmp_path / "my kernels" / "good one.ptx"
    kernel.parent.mkdir()
    shutil.copy(ROOT / "tests/data/agent/good.ptx", kernel)
    result = CliRunner().invoke(app, ["profile", W, str(kernel)])
    assert result.exit_code == 2, result.output
    assert _words_after(re.sub(r"\s*\n\s*", " ", result.output), "ptxbench compile") == \
        ["ptxbench", "compile", str(kernel), "--workload", W], result.output


def test_the_bench_names_a_run_folder_that_looks_like_markup_as_it_is(tmp_path):
    """The bench's closing lines went through rich with markup on: a run folder named `[b]x[/b]` was printed as `x`,
    its run and report paths not the ones on disk."""
    run = tmp_path / "[bold]run[/bold] 1"
    result = CliRunner().invoke(app, ["bench", "--models", "builtin/reference", "--workloads", W, "--trajectories", "1",
                                      "--turns", "1", "--no-gpu", "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # rich wraps long lines
    assert f"run: {run}" in text and f"report: {run / 'report' / 'index.html'}" in text, result.output
