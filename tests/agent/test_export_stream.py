"""The export writes its rows as they are built: rows are planned without their text, built again one trajectory at a
time, and written to the split files as they come (Parquet in row groups), so a large run's export holds one
trajectory's rows, not all of them."""
from __future__ import annotations

import json

import pytest

from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
from ptxbench.agent.export import recipes, writer
from ptxbench.agent.export.writer import write_dataset

from export_runs import result, write_trajectory


def _run(tmp_path, n=4):
    run = tmp_path / "run"
    for i in range(n):
        write_trajectory(run, f"t{i}", "gemm_bf16_m8192_n7168_k5120",
                         [(f"k{i}a", result("PASSED", 1.0 + i, True), "ok"), (f"k{i}b", result("PASSED", 2.0 + i, True), "ok")])
    return run


def test_a_planned_row_holds_no_text_and_is_built_again_as_it_was(tmp_path):
    samples = collect_samples([_run(tmp_path)])
    cfg = ExportConfig(recipe="kernelgen")
    plan, stats = recipes.plan_rows(samples, cfg)
    assert len(plan) == 8 == stats["rows"] and all(r.prompt == r.completion == r.messages == [] for r in plan)
    built = list(recipes.materialize(plan, samples, cfg))
    assert [r.id for r in built] == [r.id for r in plan]
    assert [r.n_tokens for r in built] == [r.n_tokens for r in plan] and all(r.n_tokens > 0 for r in built)
    assert all(r.completion and r.messages[-1] == r.completion[-1] for r in built)


def test_materialize_builds_one_trajectory_at_a_time(tmp_path, monkeypatch):
    samples = collect_samples([_run(tmp_path)])
    cfg = ExportConfig(recipe="kernelgen")
    plan, _ = recipes.plan_rows(samples, cfg)
    built_for = []
    real = recipes.candidate_rows
    monkeypatch.setattr(recipes, "candidate_rows", lambda s, *a, **k: built_for.append(s.trajectory) or real(s, *a, **k))
    rows = recipes.materialize(plan, samples, cfg)
    next(rows), next(rows)
    assert built_for == ["t0"]  # the first trajectory's two rows, and nothing of the others yet
    next(rows)
    assert built_for == ["t0", "t1"]


def test_parquet_rows_go_out_in_row_groups_and_load_as_the_rows(tmp_path, monkeypatch):
    import datasets
    import pyarrow.parquet as pq

    monkeypatch.setattr(writer, "PARQUET_BATCH", 3)
    cfg = ExportConfig(recipe="kernelgen")
    rows, stats = build_rows(collect_samples([_run(tmp_path)]), cfg)
    paths = write_dataset(iter(rows), tmp_path / "out", "parquet", cfg, stats, [])
    assert pq.ParquetFile(paths["train"]).num_row_groups == 3  # 8 rows: 3 + 3 + 2
    ds = datasets.load_dataset("parquet", data_files=str(paths["train"]))["train"]
    assert ds.features == datasets.Features.from_dict(
        json.loads((tmp_path / "out" / "export_manifest.json").read_text())["features"])
    assert ds.to_list() == [r.model_dump(mode="json") for r in rows]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_an_error_while_rows_stream_leaves_the_earlier_export_whole(tmp_path, fmt):
    """A teacher's outage stops the export after some rows were written: no staged file stays, and the export that
    was in the folder before is as it was (its splits, its manifest)."""
    cfg = ExportConfig(recipe="kernelgen")
    rows, stats = build_rows(collect_samples([_run(tmp_path)]), cfg)
    out = tmp_path / "out"
    write_dataset(rows[:2], out, fmt, cfg, stats, [])
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def stopped():
        yield from rows[:5]
        raise RuntimeError("the provider is down")

    with pytest.raises(RuntimeError, match="down"):
        write_dataset(stopped(), out, fmt, cfg, stats, [])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
