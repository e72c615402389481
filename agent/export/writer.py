"""Write rows as JSONL or Parquet splits (loadable with datasets.load_dataset), or as OpenAI chat fine-tuning files,
plus a manifest of what was kept."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from ...tools.redact import mask_strings
from .host_paths import api_base_name, model_name, run_name, tokenizer_name
from .schema import ExportConfig, Row, dataset_features


FORMATS = ("parquet", "jsonl", "openai")
SPLIT_SUFFIX = {"parquet": "parquet", "jsonl": "jsonl", "openai": "openai.jsonl"}
SPLIT_FILES = tuple(f"{split}.{suffix}" for suffix in SPLIT_SUFFIX.values() for split in ("train", "test"))
MANIFEST_NAME = "export_manifest.json"
# What `datasets.load_dataset(..., data_dir=out)` may read as rows (its packaged formats, text and media aside).
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow", ".csv", ".tsv")


# Line separators a JSON string may hold raw but that str.splitlines() (and some JSONL readers) break a line at.
_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"}


def jsonl_line(row) -> str:
    """One row of a JSONL file: UTF-8 kept, but the characters that other readers take for a line break escaped."""
    text = json.dumps(row, ensure_ascii=False)
    for raw, escaped in _LINE_BREAKS.items():
        text = text.replace(raw, escaped)
    return text + "\n"


def foreign_files(out: Path) -> list[Path]:
    """The data files in `out` that no earlier export wrote: everything there, at any depth, with a DATA_SUFFIXES
    suffix, but for the manifest and, beside it, the split files it replaces. Hidden files and folders are left out,
    as datasets leaves them out (.git, an earlier export's .teacher_cache). Other files (notes, a README) are no data and may stay."""
    if not out.is_dir():
        return []
    ours = {MANIFEST_NAME, *(SPLIT_FILES if (out / MANIFEST_NAME).is_file() else ())}
    found = []
    for folder, dirs, files in os.walk(out):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))  # not walked: .git
        for name in sorted(files):
            rel = (Path(folder) / name).relative_to(out)
            if not name.startswith((".", "__")) and rel.suffix.lower() in DATA_SUFFIXES and str(rel) not in ours:
                found.append(out / rel)
    return found


def _remove_old_splits(out: Path) -> None:
    """Remove the split files an earlier export left in `out`, in either format. The folder is one dataset:
    `datasets.load_dataset(..., data_dir=out)` loads every split file in it, so a split this export does not write
    (a test split of an earlier --test-workloads, the other format) would load as part of it. Nothing else in the
    folder is touched."""
    for name in SPLIT_FILES:
        (out / name).unlink(missing_ok=True)


def openai_example(row: dict) -> dict:
    """One line of OpenAI's chat fine-tuning file: the row's messages alone, each assistant message with its `weight`
    (0 for a prompt's wrong kernel, 1 for the completion): OpenAI trains on every assistant message that has no weight
    of 0, so without it a Fixit row taught the wrong kernel too."""
    n_prompt = len(row["prompt"])
    return {"messages": [{"role": m["role"], "content": m["content"]}
                         | ({"weight": int(i >= n_prompt)} if m["role"] == "assistant" else {})
                         for i, m in enumerate(row["messages"])]}


def _staged(path: Path) -> Path:
    """Where `path` is written first: hidden (load_dataset and foreign_files pass it by), put in place once every file
    of the export is written. A Ctrl-C mid-export left split files without a manifest, which the next export into the
    same --out refused as data no export wrote."""
    return path.with_name(f".{path.name}.partial")


PARQUET_BATCH = 256  # rows per Parquet row group: a batch's rows are all the text held at once


class _SplitFile:
    """One split's staged file, written row by row: JSONL lines, or Parquet row groups of PARQUET_BATCH rows typed by
    the schema (not by the rows: a column null in all of them would be typed null)."""

    def __init__(self, path: Path, fmt: str):
        self.path, self.fmt, self.batch, self.writer = path, fmt, [], None
        self.file = open(_staged(path), "w", encoding="utf-8") if fmt in ("jsonl", "openai") else None

    def write(self, row: dict) -> None:
        if self.file:
            self.file.write(jsonl_line(openai_example(row) if self.fmt == "openai" else row))
            return
        self.batch.append(row)
        if len(self.batch) >= PARQUET_BATCH:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        features = dataset_features()
        if self.writer is None:  # the schema carries the features, as datasets writes them: load_dataset reads them back
            self.writer = pq.ParquetWriter(str(_staged(self.path)), features.arrow_schema)
        rows = [features.encode_example(r) for r in self.batch]
        self.writer.write_table(pa.Table.from_pylist(rows, schema=features.arrow_schema))
        self.batch = []

    def close(self) -> None:
        if self.file:
            self.file.close()
            return
        if self.batch:
            self._flush()
        self.writer.close()


def write_dataset(rows: Iterable[Row], out: Path, fmt: str, cfg: ExportConfig, stats: dict, runs: list[str]) -> dict[str, Path]:
    """Write the rows as they come (an iterator keeps one trajectory's rows in memory, not the export's), then the
    manifest. Everything is staged under hidden names and put in place at the end; an error on the way (a teacher's
    outage) removes the staged files and leaves the folder as it was."""
    out.mkdir(parents=True, exist_ok=True)
    for left in out.glob(".*.partial"):  # an export stopped before its files were put in place
        left.unlink(missing_ok=True)
    files: dict[str, _SplitFile] = {}
    by_group: dict[str, int] = {}
    try:
        for r in rows:
            if r.split not in files:
                files[r.split] = _SplitFile(out / f"{r.split}.{SPLIT_SUFFIX[fmt]}", fmt)
            row = r.model_dump(mode="json")
            row["tokenizer"] = tokenizer_name(row["tokenizer"])  # an hf:<folder> as its name: no host path leaves
            files[r.split].write(mask_strings(row))  # keys never leave
            key = f"{r.split}/{r.workload}/{r.failure_class or 'ok'}"
            by_group[key] = by_group.get(key, 0) + 1
        for f in files.values():
            f.close()
    except BaseException:
        for f in files.values():
            try:
                f.close()
            except Exception:  # the cause is the error already on its way
                pass
            _staged(f.path).unlink(missing_ok=True)
        raise
    paths = {split: files[split].path for split in ("train", "test") if split in files}
    # the runs and an hf:<folder> tokenizer by their names, as the rows name a run: the paths as given told the
    # exporting host's username and folders (host_paths.py)
    # the teacher's server as its scheme (a public provider's host too): never a host, user, token or path of ours
    config = cfg.model_dump() | {"tokenizer": tokenizer_name(cfg.tokenizer),
                                 "teacher": model_name(cfg.teacher) if cfg.teacher else None,
                                 "teacher_api_base": api_base_name(cfg.teacher_api_base) if cfg.teacher_api_base else None}
    if isinstance(teacher := stats.get("teacher"), dict) and teacher.get("teacher"):  # with_reasoning's totals
        stats = stats | {"teacher": teacher | {"teacher": model_name(teacher["teacher"])}}
    manifest = {"config": config, "runs": [run_name(r) for r in runs], "stats": stats,
                "counts": dict(sorted(by_group.items())),
                "files": {k: v.name for k, v in paths.items()}, "schema": "docs/dataset-schema.md"}
    try:  # JSONL carries no types: load_dataset("json", ..., features=datasets.Features.from_dict(this))
        if fmt != "openai":  # the row schema: an OpenAI file's lines are {"messages": [...]} alone
            manifest["features"] = dataset_features().to_dict()
    except ImportError:  # a JSONL export needs no datasets package
        pass
    _staged(out / MANIFEST_NAME).write_text(json.dumps(mask_strings(manifest), indent=2))
    _remove_old_splits(out)  # the earlier export's, now that this one's are all written
    for path in [*paths.values(), out / MANIFEST_NAME]:  # the manifest last: the splits beside it are its own
        os.replace(_staged(path), path)
    return paths
