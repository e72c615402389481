"""Sealing a run: each finished trajectory's log gzipped in place (trajectory.jsonl -> trajectory.jsonl.gz).

A log holds the whole conversation at every model call, so it grows with the square of the turns (an 8-turn climb
writes about 1.8 MB); gzip keeps a fifth of that. Everything that reads runs (score, report, export, replay) reads a
sealed log as it reads a live one (rundir.trajectory_log); nothing appends to one (rundir.TrajectoryWriter refuses),
so a run is unsealed before it is continued. Only logs that end in a `stop` event are sealed: a trajectory still
being written, or killed mid-run, keeps its live log.

A run folder may come from someone else: sealing rewrites only regular files in real folders of the run. A
trajectory folder or log that is a symbolic link is left alone (it may point at the reader's own files), and the
new file is written under a fresh name and renamed into place (tools/atomic.replacing), so a link planted under the
new name is replaced, never written through.
"""
from __future__ import annotations

import contextlib
import errno
import gzip
import shutil
import zlib
from pathlib import Path

from ptxbench.tools.atomic import replacing

from .folder_lock import FolderHeld, hold_folder, release
from .rundir import LOG_NAME, SEALED_LOG_NAME, DamagedRecord, read_events, trajectory_folders


def _replace(src: Path, dst: Path, read, write) -> None:
    """Copy src to dst (`read` opens src, `write` wraps the binary file written) through `replacing`, then remove
    src: a kill at any point leaves src whole."""
    with read(src) as fin, replacing(dst) as raw, write(raw) as fout:
        shutil.copyfileobj(fin, fout)
    src.unlink()


def _gzip_writer(raw):
    # mtime 0 and no file name in the header: the same log seals to the same bytes
    return gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0)


def _own_folders(run_dir: Path) -> list[Path]:
    """The trajectory folders of run_dir that are real folders (a link may lead out of the run)."""
    return [folder for folder in trajectory_folders(run_dir) if not folder.is_symlink()]


def _own_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


@contextlib.contextmanager
def _holding_run(run_dir: Path):
    """The run folder's lock while its logs are rewritten, or FolderHeld when a bench runs in it: a trajectory that
    ends in an infra stop is one the bench is about to retry (sealed, every retry failed), and an event the bench
    appends while a log is copied would be lost."""
    try:
        lock = hold_folder(Path(run_dir))
    except FolderHeld:
        raise FolderHeld(errno.EWOULDBLOCK, "in use by a running bench: seal it (or undo) once the bench ends",
                         str(run_dir)) from None
    try:
        yield
    finally:
        release(lock)


def _run_elsewhere(folder: Path) -> bool:
    """Whether another process runs this trajectory (optimize holds the trajectory folder it runs)."""
    try:
        release(hold_folder(folder))
    except FolderHeld:
        return True
    return False


def seal_run(run_dir: Path) -> tuple[list[Path], list[Path]]:
    """Gzip the log of every finished trajectory of run_dir. Returns (folders sealed now, folders left live)."""
    sealed, live = [], []
    with _holding_run(run_dir):
        for folder in _own_folders(run_dir):
            log = folder / LOG_NAME
            if not _own_file(log):
                continue  # sealed before, or a link
            events = read_events(log)
            if not events or events[-1].type != "stop" or _run_elsewhere(folder):
                live.append(folder)
                continue
            _replace(log, folder / SEALED_LOG_NAME, lambda path: open(path, "rb"), _gzip_writer)
            sealed.append(folder)
    return sealed, live


def unseal_run(run_dir: Path) -> list[Path]:
    """Turn every sealed log of run_dir back into a live trajectory.jsonl. Returns the folders unsealed."""
    done = []
    with _holding_run(run_dir):
        for folder in _own_folders(run_dir):
            packed = folder / SEALED_LOG_NAME
            if not _own_file(packed):
                continue
            try:
                _replace(packed, folder / LOG_NAME, gzip.open, contextlib.nullcontext)
            except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # left sealed: only a whole log is unsealed
                raise DamagedRecord(packed, f"not a whole gzip file ({exc or type(exc).__name__}); left as it is") from None
            done.append(folder)
    return done
