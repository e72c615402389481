"""The trajectory log's writer under Ctrl-C: every event keeps its own seq, and no line is glued onto a cut one."""
from __future__ import annotations

import os

import pytest

from ptxbench.agent.records.events import Stop
from ptxbench.agent.records.rundir import TrajectoryWriter, read_events


def test_a_ctrl_c_as_an_event_is_synced_leaves_the_next_event_its_own_seq(tmp_path, monkeypatch):
    """SIGINT mostly lands as fsync returns: the line was in the file, but the seq was not counted, so the interrupted
    run's stop event took the same seq (a resume-while-running test read 44 twice)."""
    writer = TrajectoryWriter(tmp_path / "t")
    writer.append(Stop(trajectory_id="t", reason="turn_limit"))
    real = os.fsync

    def interrupted(fd):
        real(fd)
        monkeypatch.setattr(os, "fsync", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        writer.append(Stop(trajectory_id="t", reason="turn_limit"))
    writer.append(Stop(trajectory_id="t", reason="error", detail="interrupted"))
    assert [e.seq for e in read_events(writer.path)] == [0, 1, 2]


@pytest.mark.parametrize("kept", ["half", "all but the newline"])
def test_a_line_cut_short_is_moved_aside_and_one_cut_of_its_newline_kept(tmp_path, monkeypatch, kept):
    """A line cut anywhere in its JSON is set aside before the next event; one that lacks only its newline is a whole
    event, kept with its seq."""
    writer = TrajectoryWriter(tmp_path / "t")
    writer.append(Stop(trajectory_id="t", turn=1, reason="turn_limit"))

    class Cut:  # the write itself interrupted
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2] if kept == "half" else data[:-1])
            self.f.flush()
            raise KeyboardInterrupt

    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, mode="r", *a, **k: Cut(real_open(p, mode, *a, **k))
                        if mode == "ab" else real_open(p, mode, *a, **k))
    with pytest.raises(KeyboardInterrupt):
        writer.append(Stop(trajectory_id="t", turn=2, reason="turn_limit"))
    monkeypatch.setattr("builtins.open", real_open)
    writer.append(Stop(trajectory_id="t", turn=3, reason="error", detail="interrupted"))
    events = read_events(writer.path)
    if kept == "half":
        assert [e.seq for e in events] == [0, 1] and [e.turn for e in events] == [1, 3]
        assert list(writer.folder.glob("trajectory.jsonl.torn-*"))
    else:
        assert [e.seq for e in events] == [0, 1, 2] and [e.turn for e in events] == [1, 2, 3]
        assert not list(writer.folder.glob("trajectory.jsonl.torn-*"))


def test_a_kernel_file_is_on_disk_before_the_event_naming_it_and_never_written_through_a_link(tmp_path, monkeypatch):
    """Kernel files were written unsynced while the eval_result naming each was fsynced: a host that went down (a spot
    VM stopped) kept the event and lost the file. And a link planted at a kernel's name in a run folder someone else
    left (resumed here) had the kernel written through it, into whatever file it named."""
    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    writer = TrajectoryWriter(tmp_path / "t")
    (writer.folder / "kernels" / "turn_01.ptx").symlink_to(outside)
    synced: set[int] = set()
    real = os.fsync

    def fsync(fd):
        synced.add(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    rel = writer.save_kernel(1, "ptx", ".version 8.5\n")
    kernel = writer.folder / rel
    assert outside.read_text() == "mine\n" and not kernel.is_symlink()
    assert kernel.read_text() == ".version 8.5\n" and kernel.stat().st_ino in synced
