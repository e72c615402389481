"""Sealing a run: each finished trajectory's log gzipped in place (trajectory.jsonl -> trajectory.jsonl.gz).

A log holds the whole conversation at every model call, so it grows with the square of the turns (an 8-turn climb
writes about 1.8 MB); gzip keeps a fifth of that. Everything that reads runs (score, report, export, replay) reads a
sealed log as it reads a live one (rundir.trajectory_log); nothing appends to one (rundir.TrajectoryWriter refuses),
so a run is unsealed before it is continued. Only logs that end in a `stop` event are sealed: a trajectory still
being written, or killed mid-run, keeps its live log.
"""
from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

from .rundir import LOG_NAME, SEALED_LOG_NAME, read_events, trajectory_folders


def _replace(src: Path, dst: Path, read, write) -> None:
    """Copy src to dst (opened by `read` / `write`) through a temporary file, fsynced and renamed, then remove src:
    a kill at any point leaves src whole."""
    tmp = dst.with_name(dst.name + ".tmp")
    with read(src) as fin, write(tmp) as fout:
        shutil.copyfileobj(fin, fout)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, dst)
    src.unlink()


def _gzip_writer(path: Path):
    return gzip.GzipFile(path, "wb", compresslevel=9, mtime=0)  # mtime 0: the same log seals to the same bytes


def seal_run(run_dir: Path) -> tuple[list[Path], list[Path]]:
    """Gzip the log of every finished trajectory of run_dir. Returns (folders sealed now, folders left live)."""
    sealed, live = [], []
    for folder in trajectory_folders(run_dir):
        log = folder / LOG_NAME
        if not log.exists():
            continue  # sealed before
        events = read_events(log)
        if not events or events[-1].type != "stop":
            live.append(folder)
            continue
        _replace(log, folder / SEALED_LOG_NAME, lambda path: open(path, "rb"), _gzip_writer)
        sealed.append(folder)
    return sealed, live


def unseal_run(run_dir: Path) -> list[Path]:
    """Turn every sealed log of run_dir back into a live trajectory.jsonl. Returns the folders unsealed."""
    done = []
    for folder in trajectory_folders(run_dir):
        packed = folder / SEALED_LOG_NAME
        if not packed.exists():
            continue
        _replace(packed, folder / LOG_NAME, gzip.open, lambda path: open(path, "wb"))
        done.append(folder)
    return done
