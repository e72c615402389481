"""A trajectory page says where the conversation was trimmed to fit the model's window (the context_trimmed event: the
turns after it were written from a smaller view of the run than the whole conversation), and which turn the run's
budget cut."""
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


def test_a_turn_the_budget_cut_is_labelled_on_its_page(tmp_path):
    """A tools-mode turn a token, cost or time budget cut before the model submitted is no scored turn
    (scoring.turns.budget_cut_turn); its page showed '–' for it."""
    from ptxbench.agent.records.events import Stop, TurnEnd
    from ptxbench.agent.report.build import write_report

    built = TrajectoryBuilder(tmp_path / "run", "t0", "m", "gemm", mode="tools").turn(1, "PASSED", 1.1, True)
    built.writer.append(TurnEnd(trajectory_id="t0", turn=2, status="FORMAT_ERROR", tokens=900))
    built.writer.append(Stop(trajectory_id="t0", turn=1, reason="token_budget"))
    page = write_report(tmp_path / "run", tmp_path / "out").trajectories[0].read_text()
    assert "cut by the run&#x27;s budget (not scored)" in page or "cut by the run's budget (not scored)" in page
