"""A log line a kill cut only of its newline is a whole event: kept (its newline written), not set aside as torn
(the writer cut by a Ctrl-C mid-append: tests/agent/test_trajectory_writer.py)."""
from __future__ import annotations

import json

from ptxbench.agent.records.events import Stop
from ptxbench.agent.records.rundir import TrajectoryWriter, read_events, repair_torn_tail


def test_a_line_missing_only_its_newline_is_kept(tmp_path):
    writer = TrajectoryWriter(tmp_path / "t")
    writer.append(Stop(trajectory_id="t", turn=1, reason="turn_limit"))
    whole = Stop(trajectory_id="t", turn=2, reason="error", detail="interrupted", seq=1).model_dump_json().encode()
    with open(writer.path, "ab") as f:
        f.write(whole)  # the kill came between the line and its newline
    again = TrajectoryWriter(tmp_path / "t")
    assert again.torn is None and not list(again.folder.glob("*.torn-*"))
    again.append(Stop(trajectory_id="t", turn=3, reason="turn_limit"))
    events = read_events(again.path)
    assert [e.turn for e in events] == [1, 2, 3] and [e.seq for e in events] == [0, 1, 2]
    # a JSON value that is no object, or an object cut short, is still a torn line
    for tail in (b"123", b'{"type": "stop"'):
        with open(again.path, "ab") as f:
            f.write(tail)
        assert repair_torn_tail(again.path).read_bytes() == tail
    assert all(json.loads(line) for line in again.path.read_text().splitlines())
