"""A trajectory page says where the conversation was trimmed to fit the model's window (the context_trimmed event):
the turns after it were written from a smaller view of the run than the whole conversation."""
from __future__ import annotations

from trajectory_builder import TrajectoryBuilder

from ptxbench.agent.records.events import ContextTrimmed


def test_a_trimmed_conversation_is_shown_on_its_turn(tmp_path):
    from ptxbench.agent.report.build import write_report

    built = TrajectoryBuilder(tmp_path / "run", "t0", "m", "gemm", mode="tools").turn(1, "COMPILE_ERROR")
    built.writer.append(ContextTrimmed(trajectory_id="t0", turn=2, view="last+stubs", policy="full",
                                       reason="window_exceeded", detail="context_length_exceeded <b>",
                                       messages_before=31, messages_after=9, chars_before=412000, chars_after=88000))
    built.turn(2, "PASSED", 1.1, True).stop()
    page = write_report(tmp_path / "run", tmp_path / "out").trajectories[0].read_text()
    turn2 = page.split("id='turn-2'")[1]
    assert ("conversation trimmed to the <code>last+stubs</code> view (the provider refused the larger one): "
            "31 messages, 412,000 characters, sent as 9, 88,000") in turn2
