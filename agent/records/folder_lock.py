"""An exclusive, non-blocking lock on a folder (flock on the folder itself): no lock file left behind, and released
however the holding process ends. A bench holds its run folder, optimize the trajectory folder it runs."""
from __future__ import annotations

import errno
import fcntl
import os
import sys
from pathlib import Path

_told: set[str] = set()  # file systems already named in a note (one line per process, not one per trajectory)


class FolderHeld(OSError):
    """Another process holds the folder."""


def hold_folder(folder: Path) -> int | None:
    """The folder's descriptor, locked for this process (close it to let go); FolderHeld when another process holds
    the lock; None where the file system has no such locks (the caller goes on unguarded)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise FolderHeld(exc.errno, f"{folder} is held by another process") from None
        _note_unguarded(folder, exc)
        return None
    return fd


def _note_unguarded(folder: Path, exc: OSError) -> None:
    """Say once that this file system takes no folder locks (NFS refuses flock on a directory, some FUSE mounts any):
    a second run started in the same folder is then not refused, which the user should know."""
    where = str(Path(folder).resolve().parent)
    if where in _told:
        return
    _told.add(where)
    print(f"note: {where} takes no file locks ({os.strerror(exc.errno) if exc.errno else exc}): a second ptxbench "
          "process started on the same run folder is not refused there, so run one at a time", file=sys.stderr)


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
