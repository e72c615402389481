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


@pytest.mark.parametrize("given,kept", [
    # a private server: its scheme alone (no user, password, address, port, path or query)
    ("http://alice:hunter2@10.1.2.3:8000/v1?token=s3cret", "http://<host>"),
    ("http://localhost:8000/v1", "http://<host>"),
    ("https://vllm.gpu-cluster.internal.example.com/v1", "https://<host>"),
    ("https://myorg.openai.azure.com/openai/deployments/teacher?api-version=2024-06-01", "https://<host>"),
    # a public provider: its host, still without a user, path (an account id) or query
    ("https://bob:pw@api.together.xyz/v1?key=s3cret#x", "https://api.together.xyz"),
    ("https://openrouter.ai/api/v1/", "https://openrouter.ai"),
    ("not a url", "<custom>"),
])
def test_the_manifest_names_no_host_or_secret_of_the_teachers_server(tmp_path, given, kept):
    """--teacher-api-base went into the manifest's config as typed: a published dataset told the teacher server's
    host, and a user, password or token in the URL."""
    run = build_run(tmp_path)
    cfg = ExportConfig(recipe="fixit", teacher="hosted_vllm/teacher", teacher_api_base=given)
    rows, stats = build_rows(collect_samples([run]), cfg)
    write_dataset(rows, tmp_path / "out", "jsonl", cfg, stats, [str(run)])
    text = (tmp_path / "out" / "export_manifest.json").read_text()
    assert json.loads(text)["config"]["teacher_api_base"] == kept
    for secret in ("alice", "hunter2", "10.1.2.3", "s3cret", "bob", "myorg", "gpu-cluster", "8000", "deployments"):
        assert secret not in text


def test_a_manifest_without_a_teachers_server_says_none(tmp_path):
    run = build_run(tmp_path)
    cfg = ExportConfig(recipe="fixit", teacher="openai/gpt-5")
    rows, stats = build_rows(collect_samples([run]), cfg)
    write_dataset(rows, tmp_path / "out", "jsonl", cfg, stats, [str(run)])
    assert json.loads((tmp_path / "out" / "export_manifest.json").read_text())["config"]["teacher_api_base"] is None
