"""The CPU-only example commands of the README and docs, run as written (from a folder laid out like the
repository root): each must still appear verbatim in its file, and exit 0."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [
    ("README.md", "ptxbench optimize smoke_gemm_bf16_m256_n256_k512 --no-gpu --turns 2"),
    ("tools/README.md", "ptxbench compile tests/data/kernels/wgmma_sm90a.ptx --json"),
    ("tools/README.md", "ptxbench compile tests/data/kernels/tcgen05_sm100a.ptx --arch sm_100a"),
    ("docs/examples/README.md", "ptxbench score docs/examples/optimize-gemm-tuner"),
    ("docs/examples/README.md", "ptxbench report docs/examples/optimize-gemm-tuner --out report-example"),
    ("docs/examples/README.md", "ptxbench export docs/examples/synth-repairs/run --recipe fixit --out data/fixit --no-require-target"),
]


@pytest.mark.parametrize("doc,command", EXAMPLES, ids=[c for _, c in EXAMPLES])
def test_documented_command_runs_as_written(doc, command, tmp_path, monkeypatch):
    assert command in (ROOT / doc).read_text(), f"{doc} no longer shows `{command}`: update this list"
    for folder in ("docs", "tests"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PTXBENCH_RUNS", str(tmp_path / "runs"))
    result = CliRunner().invoke(app, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output


def test_the_synth_example_says_why_rows_are_dropped_without_the_lifted_filter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["export", str(ROOT / "docs/examples/synth-repairs/run"), "--recipe", "fixit",
                                      "--out", "out", "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    assert "0 fixit rows from 8 trajectories" in result.output
    assert "8 trajectories gave no row: the target instructions were not seen executing" in result.output


def test_the_usage_line_names_the_option_that_lists_the_no_gpu_examples_workload():
    """The README's no-GPU example runs a smoke workload, which `ptxbench workloads` lists only with --all."""
    assert "ptxbench workloads [--all] [--json]" in (ROOT / "README.md").read_text()
    smoke = "smoke_gemm_bf16_m256_n256_k512"
    assert smoke in CliRunner().invoke(app, ["workloads", "--all"]).output
    assert smoke not in CliRunner().invoke(app, ["workloads"]).output


def _commands(command, path=()):
    """(command path, command) for every leaf command of the app (click's or typer's own copy of click alike)."""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), command


def test_every_option_of_every_command_is_named_in_the_docs():
    """The README's usage lines, docs/ and the folder READMEs name every option (either form of a --x/--no-x flag):
    --gpus, --parallel, --no-report, --temperature, --no-dedup ... were in --help alone."""
    import re

    import typer

    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("*/README.md"),
                                             *ROOT.glob("*/*/README.md")])
    missing = [f"{path} {'/'.join(param.opts + param.secondary_opts)}"
               for path, command in _commands(typer.main.get_command(app))
               for param in command.params
               if getattr(param, "param_type_name", "") == "option" and "--help" not in param.opts
               and not any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", docs)
                           for name in param.opts + param.secondary_opts)]
    assert not missing, f"options no doc names: {missing}"


def test_the_help_of_each_run_folder_default_names_the_runs_root():
    """optimize's --run-dir said `runs/<time>_...` while the folder goes under $PTXBENCH_RUNS when that is set."""
    import typer

    commands = dict(_commands(typer.main.get_command(app)))
    for name in ("optimize", "bench", "synth-repairs"):
        (run_dir,) = [p for p in commands[name].params if "--run-dir" in getattr(p, "opts", [])]
        assert "<runs root>" in run_dir.help, (name, run_dir.help)
    assert "$PTXBENCH_RUNS" in " ".join(p.help or "" for p in commands["optimize"].params)
