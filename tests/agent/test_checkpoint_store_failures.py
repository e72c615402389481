"""The compact checkpointer after a write that failed (a locked database, a full disk): what it stores later must
still read back."""
from __future__ import annotations

import operator
import sqlite3
from typing import Annotated, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from ptxbench.agent.records.checkpoint_store import CompactSqliteSaver


class State(TypedDict, total=False):
    turns: Annotated[list, operator.add]
    n: int


def _graph(saver):
    def step(state: State) -> dict:
        n = state.get("n", 0) + 1
        return {"turns": [{"turn": n, "text": "x" * 200}], "n": n}

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= 12 else "step")
    return g.compile(checkpointer=saver)


class FailsOnce(CompactSqliteSaver):
    """The `fail_at`-th put's insert of channel values fails, as a locked database makes it fail."""

    def __init__(self, conn, fail_at: int):
        super().__init__(conn)
        self.puts, self.fail_at = 0, fail_at

    def put(self, config, checkpoint, metadata, new_versions):
        self.puts += 1
        if self.puts == self.fail_at:
            real = self.cursor

            def locked(transaction: bool = True):
                self.cursor = real
                raise sqlite3.OperationalError("database is locked")
            self.cursor = locked
        return super().put(config, checkpoint, metadata, new_versions)


def test_a_failed_write_leaves_no_later_value_stored_on_a_version_that_is_not_there(tmp_path):
    """The saver took a list as stored before its row was written: when the write failed (a bench's retry goes on in
    the same process), the next version of the list was stored as a tail on the missing one, and the thread could
    never be read again (KeyError on every resume)."""
    conn = sqlite3.connect(str(tmp_path / "c.sqlite"), check_same_thread=False)
    cfg = {"configurable": {"thread_id": "t"}}
    saver = FailsOnce(conn, fail_at=4)
    graph = _graph(saver)
    with pytest.raises(sqlite3.OperationalError):
        graph.invoke({"n": 0, "turns": []}, cfg)
    graph.invoke(None, cfg)  # the retry, in the same process, with the same saver
    state = _graph(CompactSqliteSaver(conn)).get_state(cfg).values
    assert [t["turn"] for t in state["turns"]] == list(range(1, 13))
