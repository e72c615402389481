"""Files written whole or not at all: a new file beside the target under a fresh name, fsynced, then renamed over
it. A reader never sees half a file (the compile cache's entries, a run's report and sealed logs), and the rename
replaces whatever is at the name, a symbolic link included, without writing through it (a link planted in a shared
run folder reaches none of the reader's files); a failure leaves the target as it was.
"""
from __future__ import annotations

import functools
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator


@functools.cache
def _file_mode() -> int:
    """What open() would give a new file: 0o666 less the umask (read by setting it, then put back at once; once per
    process, since the umask is process-wide state other threads may be creating files under)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def replacing(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write `path` through (its folder is made if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode())  # mkstemp makes 0600 files
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: Path, data: bytes) -> Path:
    """Write `data` to `path` through `replacing`."""
    with replacing(path) as f:
        f.write(data)
    return Path(path)
