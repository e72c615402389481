"""One set of runs is one dataset, whatever order `export` is given them in: `export A B` and `export B A` kept other
copies of a duplicate row (another run, trajectory and model in its provenance), wrote the rows in another order,
drew --max-per-group's ties in another order and listed the runs in another order in the manifest."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli.main import app
from ptxbench.agent.records.rundir import write_manifest

from export_runs import result, write_trajectory

GEMM = "gemm_bf16_m8192_n7168_k5120"


def _run(root: Path, name: str, model: str) -> Path:
    """A run whose kernels repeat the other run's (variants a, b, c), each under its own run, ids and model."""
    run = root / name
    write_manifest(run, {"gpu": {"name": "NVIDIA H200"}})
    write_trajectory(run, f"{name}-1", GEMM, [
        ("a", result("COMPILE_ERROR"), "line 3: ptxas error: unknown symbol"),
        ("b", result("PASSED", 0.8, True), "passed, 0.80x"),
    ], model=model)
    write_trajectory(run, f"{name}-2", GEMM, [
        ("c", result("INCORRECT_NUMERICAL"), "max abs error 3.1"),
        ("b", result("PASSED", 0.8, True), "passed, 0.80x"),
        (name, result("PASSED", 0.8, True), "passed, 0.80x"),  # a tie for --max-per-group
    ], model=model)
    return run


def _export(runs: list[Path], out: Path, fmt: str, recipe: str) -> dict[str, bytes]:
    res = CliRunner().invoke(app, ["export", *map(str, runs), "--recipe", recipe, "--format", fmt, "--out", str(out),
                                   "--max-per-group", "2"])
    assert res.exit_code == 0, res.output
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("recipe", ["kernelgen", "fixit"])
@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "openai"])
def test_the_same_runs_in_either_order_give_the_same_files(tmp_path, fmt, recipe):
    zeta, alpha = _run(tmp_path, "zeta", "m-zeta"), _run(tmp_path, "alpha", "m-alpha")
    forward = _export([zeta, alpha], tmp_path / "forward", fmt, recipe)
    backward = _export([alpha, zeta], tmp_path / "backward", fmt, recipe)
    assert forward.keys() == backward.keys() and "export_manifest.json" in forward
    assert forward == backward


def test_collect_samples_reads_the_runs_in_one_order_whatever_order_they_come_in(tmp_path):
    """build_rows keeps the first copy of a duplicate row: that must be the same copy for either order."""
    from ptxbench.agent.export import ExportConfig, build_rows, collect_samples

    zeta, alpha = _run(tmp_path, "zeta", "m-zeta"), _run(tmp_path, "alpha", "m-alpha")
    cfg = ExportConfig(recipe="kernelgen")
    forward, backward = (build_rows(collect_samples(runs), cfg)[0] for runs in ([zeta, alpha], [alpha, zeta]))
    assert [r.model_dump() for r in forward] == [r.model_dump() for r in backward]
    assert {r.provenance.run for r in forward} == {"alpha", "zeta"}
