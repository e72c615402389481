"""Ctrl-C and SIGTERM arriving while a record is being made: held until it is whole, then raised as the stop they
are. Raised inside pydantic's serializer, a Ctrl-C came out as a PydanticSerializationError, so `optimize` ended with a
traceback and exit status 1 instead of its one line and 130 (143 for SIGTERM), and the event it was writing was lost."""
from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel, field_serializer
from pydantic_core import PydanticSerializationError

from ptxbench.agent.cli.sigterm import Terminated, on_sigterm
from ptxbench.agent.records.events import Stop
from ptxbench.tools.held_signals import signals_held
from ptxbench.agent.records.rundir import TrajectoryWriter, read_events


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    """Python's own Ctrl-C handler, whatever the test runner set."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class Stopped(BaseModel):
    """A model whose serialization meets a signal, as a Ctrl-C meets a long event's model_dump_json."""
    text: str
    sig: int = signal.SIGINT

    @field_serializer("text")
    def _stop_here(self, text: str) -> str:
        signal.raise_signal(self.sig)
        return text


def test_unheld_a_ctrl_c_in_pydantic_serializer_comes_out_as_its_error():
    """Why the hold exists: the stop is wrapped, and `except KeyboardInterrupt` never sees it."""
    caught = None
    try:  # caught whatever it is: a bare KeyboardInterrupt reaching pytest would end the whole session
        Stopped(text="x").model_dump_json()
    except BaseException as exc:  # noqa: BLE001
        caught = exc
    assert isinstance(caught, PydanticSerializationError) and "KeyboardInterrupt" in str(caught), repr(caught)


def test_held_the_record_is_made_whole_and_the_stop_raised_after_it():
    made = []
    with pytest.raises(KeyboardInterrupt) as raised:
        with signals_held():
            made.append(Stopped(text="whole").model_dump_json())
    assert type(raised.value) is KeyboardInterrupt
    assert made == ['{"text":"whole","sig":2}']
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_sigterm_under_on_sigterm_is_raised_as_terminated_after_the_block():
    made = []
    with on_sigterm():
        with pytest.raises(Terminated):
            with signals_held():
                made.append(Stopped(text="t", sig=signal.SIGTERM).model_dump_json())
    assert made and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_no_signal_no_raise_and_nested_holds_raise_once_at_the_outer_end():
    with signals_held():
        inside = signal.getsignal(signal.SIGINT)
    assert inside is not signal.default_int_handler  # held while inside
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back, and nothing raised
    order = []
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            with signals_held():
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)
                order.append("inner")
            order.append("outer")  # the inner block's end gave the stop to the outer hold, which still holds it
    assert order == ["inner", "outer"]


def test_a_holding_handler_left_in_place_after_the_block_raises_as_the_handler_it_stood_for():
    """A stop that cuts the putting back short leaves the holding handler in place: it must not swallow later stops."""
    with signals_held():
        stale = signal.getsignal(signal.SIGINT)
    assert stale is not signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        stale(signal.SIGINT, None)


def test_a_worker_thread_leaves_the_handlers_alone():
    seen = []

    def work():
        with signals_held():
            seen.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [signal.default_int_handler]


def test_a_ctrl_c_inside_an_events_serialization_keeps_the_line_and_its_seq(tmp_path, monkeypatch):
    writer = TrajectoryWriter(tmp_path / "t")
    real = Stop.model_dump_json

    def interrupted(self, **kw):
        signal.raise_signal(signal.SIGINT)  # as pydantic's serializer runs: with the hold, only noted
        return real(self, **kw)

    monkeypatch.setattr(Stop, "model_dump_json", interrupted)
    with pytest.raises(KeyboardInterrupt) as raised:
        writer.append(Stop(trajectory_id="t", turn=1, reason="turn_limit"))
    assert type(raised.value) is KeyboardInterrupt
    monkeypatch.setattr(Stop, "model_dump_json", real)
    writer.append(Stop(trajectory_id="t", turn=1, reason="error", detail="interrupted"))
    events = read_events(writer.path)
    assert [(e.seq, e.reason) for e in events] == [(0, "turn_limit"), (1, "error")]


def test_a_ctrl_c_inside_a_compile_cache_entrys_serialization_stores_it_whole(tmp_path, monkeypatch):
    from ptxbench.tools.cache import CompileCache
    from ptxbench.tools.results import CompileResult

    cache, key = CompileCache(tmp_path, max_bytes=None), "ab" * 32
    real = CompileResult.model_dump_json

    def interrupted(self, **kw):
        signal.raise_signal(signal.SIGINT)
        return real(self, **kw)

    monkeypatch.setattr(CompileResult, "model_dump_json", interrupted)
    with pytest.raises(KeyboardInterrupt) as raised:
        cache.put(key, CompileResult(status="ok", arch="sm_90a"), b"\0" * 64)
    assert type(raised.value) is KeyboardInterrupt
    monkeypatch.setattr(CompileResult, "model_dump_json", real)
    hit = cache.get(key)
    assert hit is not None and hit.status == "ok" and Path(hit.cubin_path).read_bytes() == b"\0" * 64


def test_a_stop_recorded_since_the_mark_names_what_a_wrapped_error_stands_for():
    from ptxbench.tools.held_signals import Terminated as HeldTerminated
    from ptxbench.tools.held_signals import record_stop, stop_since, stops_so_far

    mark = stops_so_far()
    wrapped = PydanticSerializationError("Error serializing to JSON: KeyboardInterrupt: ")
    assert stop_since(mark, wrapped) is None  # no stop since the mark: a crash stays a crash
    record_stop(signal.SIGINT)
    assert type(stop_since(mark, wrapped)) is KeyboardInterrupt
    assert stop_since(mark, KeyboardInterrupt()) is None  # already the stop
    record_stop(signal.SIGTERM)
    assert isinstance(stop_since(mark, ValueError("x")), HeldTerminated) and HeldTerminated is Terminated
    assert stop_since(stops_so_far(), wrapped) is None
    seen = []
    t = threading.Thread(target=lambda: seen.append(stop_since(mark, wrapped)))
    t.start()
    t.join()
    assert seen == [None]  # handlers raise on the main thread only: another thread's error is its own


def test_on_sigterm_records_ctrl_c_where_pythons_handler_stands_and_leaves_an_ignored_one_ignored():
    from ptxbench.tools.held_signals import stops_so_far

    mark = stops_so_far()
    with on_sigterm():
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert stops_so_far() == mark + 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with on_sigterm():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # a background job's Ctrl-C stays ignored
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_wrapped_by_pydantic_outside_any_hold_still_stops_the_run_and_resumes(tmp_path, monkeypatch, sig):
    """A stop inside an unheld dump (a state update's) came out as pydantic's error: the run crashed. Under the CLI's
    handlers the stop is recorded, and the run ends as stopped: the stop raised, the log saying so, --resume going on."""
    from ptxbench.agent.loop.optimize import optimize
    from ptxbench.agent.loop.state import OptimizeConfig
    from ptxbench.agent.records.trajectory import TrajectoryLog

    logged = TrajectoryLog.turn_end

    def stopped_in_a_dump(self, turn, *args, **kwargs):
        if turn == 2:
            Stopped(text="x", sig=sig).model_dump()  # the stop, wrapped as PydanticSerializationError
        return logged(self, turn, *args, **kwargs)

    monkeypatch.setattr(TrajectoryLog, "turn_end", stopped_in_a_dump)
    config = OptimizeConfig(workload="smoke_gemm_bf16_m256_n256_k512", model="builtin/tuner", no_gpu=True, turns=3)
    with on_sigterm():
        with pytest.raises(KeyboardInterrupt) as raised:
            optimize(config, run_dir=tmp_path / "run")
    assert type(raised.value) is (Terminated if sig == signal.SIGTERM else KeyboardInterrupt)
    assert isinstance(raised.value.__cause__, PydanticSerializationError)
    monkeypatch.setattr(TrajectoryLog, "turn_end", logged)
    log = next((tmp_path / "run" / "trajectories").glob("*/trajectory.jsonl"))
    last = read_events(log)[-1]
    how = "SIGTERM" if sig == signal.SIGTERM else "Ctrl-C"
    assert last.type == "error" and last.message.startswith(f"interrupted by the user ({how})") and last.infra
    assert optimize(resume=tmp_path / "run").stop_reason == "turn_limit"
