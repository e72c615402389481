"""Whether an exception is the run folder's storage giving out (a full disk or quota, a file-size limit, a file system
gone read-only or failing, a file of it this user may not write), and what gave out, in words: the bench stops on it
(agent/bench/runner.py) and the CLI says it in one line with the --resume that continues the run
(agent/cli/preflight.py)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

# The OS's words for storage that gave out, and SQLite's (the checkpoints): a run cut by them is no bug of ptxbench's
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}
SQLITE_STORAGE = ("disk i/o error", "database or disk is full", "readonly database", "unable to open database file")
# No permission to write (a run folder shared by a teammate, its folders theirs): every retry meets it again too
PERMISSION_ERRNOS = {errno.EACCES, errno.EPERM}


def storage_failure(exc: BaseException, run_dir: str | Path | None = None) -> str | None:
    """What gave out, in words, when `exc` is the run folder's storage failing mid-run; None for anything else. A
    permission refused counts only for a file named inside `run_dir`: one elsewhere (a tool's cache, a compiler) is
    no fault of the run folder's."""
    import sqlite3

    if isinstance(exc, OSError) and exc.errno in PERMISSION_ERRNOS and _inside(exc.filename, run_dir):
        return f"no permission in the run folder: {exc.strerror or errno.errorcode[exc.errno]} ({exc.filename})"
    # EIO only with a file named: a terminal gone away fails writes to stdout with EIO too, and is no storage
    if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS and (exc.errno != errno.EIO or exc.filename):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or errno.errorcode.get(exc.errno, exc)}{where}"
    if isinstance(exc, sqlite3.OperationalError) and any(m in str(exc).lower() for m in SQLITE_STORAGE):
        return f"the checkpoint database: {exc}"
    return None


def _inside(filename, run_dir: str | Path | None) -> bool:
    if run_dir is None or not isinstance(filename, (str, Path)) or not str(filename):
        return False
    try:
        return Path(os.path.abspath(filename)).is_relative_to(Path(os.path.abspath(run_dir)))
    except (ValueError, OSError):
        return False
