"""Write rows as JSONL or Parquet splits (loadable with datasets.load_dataset) plus a manifest of what was kept."""
from __future__ import annotations

import json
from pathlib import Path

from ...tools.redact import mask_strings
from .schema import ExportConfig, Row


SPLIT_FILES = ("train.jsonl", "test.jsonl", "train.parquet", "test.parquet")


def _remove_old_splits(out: Path) -> None:
    """Remove the split files an earlier export left in `out`, in either format. The folder is one dataset:
    `datasets.load_dataset(..., data_dir=out)` loads every split file in it, so a split this export does not write
    (a test split of an earlier --test-workloads, the other format) would load as part of it. Nothing else in the
    folder is touched (.teacher_cache stays)."""
    for name in SPLIT_FILES:
        (out / name).unlink(missing_ok=True)


def write_dataset(rows: list[Row], out: Path, fmt: str, cfg: ExportConfig, stats: dict, runs: list[str]) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    _remove_old_splits(out)
    paths: dict[str, Path] = {}
    for split in ("train", "test"):
        part = [mask_strings(r.model_dump(mode="json")) for r in rows if r.split == split]  # keys never leave
        if not part:
            continue
        path = out / f"{split}.{ 'jsonl' if fmt == 'jsonl' else 'parquet'}"
        if fmt == "jsonl":
            with open(path, "w", encoding="utf-8") as f:
                for r in part:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
        else:
            import datasets

            datasets.Dataset.from_list(part).to_parquet(str(path))
        paths[split] = path
    by_group: dict[str, int] = {}
    for r in rows:
        key = f"{r.split}/{r.workload}/{r.failure_class or 'ok'}"
        by_group[key] = by_group.get(key, 0) + 1
    manifest = {"config": cfg.model_dump(), "runs": runs, "stats": stats, "counts": by_group,
                "files": {k: v.name for k, v in paths.items()}, "schema": "docs/dataset-schema.md"}
    (out / "export_manifest.json").write_text(json.dumps(mask_strings(manifest), indent=2))
    return paths
