"""export_manifest.json says what the split files beside it are, and nothing that does not fit them."""
from __future__ import annotations

import json

import pytest

from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
from ptxbench.agent.export.writer import write_dataset

from export_runs import build_run


@pytest.mark.parametrize("fmt", ["jsonl", "openai"])
def test_the_manifests_features_load_the_files_beside_it(tmp_path, fmt):
    """The manifest's `features` (the row schema, for loading JSONL typed) stood beside `--format openai` files too,
    whose lines are {"messages": [...]} alone: loading them with it, as the schema doc says for JSONL, failed."""
    import datasets

    run = build_run(tmp_path)
    cfg = ExportConfig(recipe="fixit", require_target_executed=False)
    rows, stats = build_rows(collect_samples([run]), cfg)
    out = tmp_path / fmt
    paths = write_dataset(rows, out, fmt, cfg, stats, [str(run)])
    manifest = json.loads((out / "export_manifest.json").read_text())
    if fmt == "openai":
        assert "features" not in manifest
        return
    features = datasets.Features.from_dict(manifest["features"])
    ds = datasets.load_dataset("json", data_files=str(paths["train"]), features=features, split="train")
    assert ds.num_rows == len(rows)
