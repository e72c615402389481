"""The compact checkpointer: a real graph run through it resumes with every completed turn, and a list that only
grows is stored as its new items (the file grows with the turns, not with their square)."""
from __future__ import annotations

import operator
import sqlite3
from typing import Annotated, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from ptxbench.agent.records.checkpoint_store import DELTA, CompactSqliteSaver
from ptxbench.tools.results import EvalResult


class State(TypedDict, total=False):
    turns: Annotated[list, operator.add]
    n: int
    eval: EvalResult | None


def _graph(saver):
    def step(state: State) -> dict:
        n = state.get("n", 0) + 1
        return {"turns": [{"turn": n, "text": "x" * 200}], "n": n,
                "eval": EvalResult(workload="w", status="PASSED", message=f"turn {n}")}

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= 12 else "step")
    return g.compile(checkpointer=saver)


def test_growing_lists_are_stored_as_tails_and_read_back_whole(tmp_path):
    conn = sqlite3.connect(str(tmp_path / "c.sqlite"), check_same_thread=False)
    cfg = {"configurable": {"thread_id": "t"}}
    _graph(CompactSqliteSaver(conn)).invoke({"n": 0, "turns": []}, cfg)
    kinds = [k for (k,) in conn.execute("SELECT type FROM channel_values WHERE channel = 'turns'")]
    assert sum(k.startswith(DELTA) for k in kinds) >= 10  # all but the first stored versions are tails
    # a fresh saver on the same file (a resumed run) reads the whole list and the typed evaluation
    state = _graph(CompactSqliteSaver(conn)).get_state(cfg).values
    assert [t["turn"] for t in state["turns"]] == list(range(1, 13))
    assert isinstance(state["eval"], EvalResult) and state["eval"].message == "turn 12"
    # every earlier checkpoint reads back too (time travel walks them)
    history = list(_graph(CompactSqliteSaver(conn)).get_state_history(cfg))
    assert all(len(h.values.get("turns", [])) == h.values.get("n", 0) for h in history)


def test_threads_reading_a_fresh_store_at_once_all_succeed(tmp_path):
    """The bench's threads all read their checkpoint first; on a fresh store they used to race into the table set-up
    on the shared connection, and the losers' trajectories were silently retried (sqlite3 SystemError)."""
    import threading

    for round_ in range(10):
        conn = sqlite3.connect(tmp_path / f"c{round_}.sqlite", check_same_thread=False)
        saver = CompactSqliteSaver(conn)
        start, errors = threading.Barrier(16), []

        def read(thread_id: int) -> None:
            start.wait()
            try:
                assert saver.get_tuple({"configurable": {"thread_id": str(thread_id)}}) is None
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=read, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], errors
        assert conn.execute("SELECT count(*) FROM channel_values").fetchone() == (0,)  # our table exists too


def test_a_hostile_checkpoint_row_is_data_never_code(tmp_path):
    """--resume reads checkpoints back; a row someone wrote into a run's checkpoints.sqlite (or one the serializer's
    old json fallback made of model text) that names a constructor or carries a pickle must come back as plain data
    or be refused, never run (langgraph-checkpoint < 3.0 built the object a json row named: CVE-2025-64439)."""
    import json
    import sqlite3

    from ptxbench.agent.records.checkpoint_store import CompactSqliteSaver

    marker = tmp_path / "ran"
    saver = CompactSqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
    row = json.dumps({"lc": 2, "type": "constructor", "id": ["subprocess", "check_output"],
                      "kwargs": {"args": ["touch", str(marker)]}}).encode()
    assert saver.serde.loads_typed(("json", row)) == json.loads(row)
    with pytest.raises(Exception):
        saver.serde.loads_typed(("pickle", f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()))
    assert not marker.exists()
