"""An exclusive, non-blocking lock on a folder (flock on the folder itself): no lock file left behind, and released
however the holding process ends. A bench holds its run folder, optimize the trajectory folder it runs."""
from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path


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
        return None
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
