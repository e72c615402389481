"""The folder lock (agent/records/folder_lock.py) on a file system without flock (NFS refuses it on a directory):
the run goes on unguarded, as before, and now says so once."""
from __future__ import annotations

import errno
import fcntl

import pytest

from ptxbench.agent.records import folder_lock


def test_a_file_system_without_locks_is_named_once_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    monkeypatch.setattr(folder_lock, "_told", set())
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        assert folder_lock.hold_folder(tmp_path / name) is None  # unguarded, not refused
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"note: {tmp_path.resolve()} takes no file locks (No locks available)")


def test_a_held_folder_is_refused_without_a_note(tmp_path, monkeypatch, capsys):
    def held(fd, op):
        raise OSError(errno.EWOULDBLOCK, "held")

    monkeypatch.setattr(fcntl, "flock", held)
    with pytest.raises(folder_lock.FolderHeld):
        folder_lock.hold_folder(tmp_path)
    assert capsys.readouterr().err == ""


def test_a_second_holder_is_refused_on_a_local_disk(tmp_path):
    fd = folder_lock.hold_folder(tmp_path)
    assert fd is not None
    try:
        import subprocess
        import sys

        probe = ("import sys; from ptxbench.agent.records.folder_lock import hold_folder, FolderHeld\n"
                 "try:\n    hold_folder(sys.argv[1])\nexcept FolderHeld:\n    sys.exit(3)\n")
        assert subprocess.run([sys.executable, "-c", probe, str(tmp_path)]).returncode == 3
    finally:
        folder_lock.release(fd)
