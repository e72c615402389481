"""Whether an exception is the run folder's storage giving out (a full disk or quota, a file-size limit, a file system
gone read-only or failing), and what gave out, in words: the bench stops on it (agent/bench/runner.py) and the CLI
says it in one line with the --resume that continues the run (agent/cli/preflight.py)."""
from __future__ import annotations

import errno

# The OS's words for storage that gave out, and SQLite's (the checkpoints): a run cut by them is no bug of ptxbench's
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}
SQLITE_STORAGE = ("disk i/o error", "database or disk is full", "readonly database", "unable to open database file")


def storage_failure(exc: BaseException) -> str | None:
    """What gave out, in words, when `exc` is the run folder's storage failing mid-run; None for anything else."""
    import sqlite3

    # EIO only with a file named: a terminal gone away fails writes to stdout with EIO too, and is no storage
    if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS and (exc.errno != errno.EIO or exc.filename):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or errno.errorcode.get(exc.errno, exc)}{where}"
    if isinstance(exc, sqlite3.OperationalError) and any(m in str(exc).lower() for m in SQLITE_STORAGE):
        return f"the checkpoint database: {exc}"
    return None
