"""The ready/go/done handshake: the GPU is held only while the replay runs its launches, never during ncu's or
Python's start-up nor the report export; every failure is a reason, never an exception or a held GPU.

A fake `ncu` (tests/ncu_fake.py) plays both ncu and the replay.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from ptxbench.tools.gpu.pool import GpuPool, PoolConfig
from ptxbench.tools.gpu.slots import SlotQueue
from ptxbench.tools.profile import runner
from ptxbench.tools.profile.gated import run_gated
from ptxbench.tools.profile.handshake import Handshake

from ncu_fake import Recorder, fake_ncu  # noqa: F401 - the fixture
from waits import wait_until


def test_the_gpu_is_held_from_go_to_done_only(fake_ncu, tmp_path):
    hold = Recorder()
    s = runner.profile_command(["replay"], counters=[], full=False, workdir=tmp_path / "w", hold=hold,
                               env=dict(os.environ, CUDA_VISIBLE_DEVICES="1"))
    stamps = fake_ncu()
    assert s.ok, s.error
    (taken, given), = hold.spans
    assert stamps["ready"] <= taken <= stamps["go"]          # start-up ran before the GPU was taken
    assert stamps["done"] <= given < stamps["exit"] - 0.2    # the report is written after the GPU is back
    assert given - taken < 0.4 and s.gpu_held_s < 0.4 and s.gpu_wait_s is not None
    assert "--section" not in s.command and "--handshake" in stamps["args"]
    assert runner.OPCODE_METRIC not in s.command[s.command.index("--metrics") + 1]  # the verdict's metrics only
    assert stamps["tmpdir"].endswith("ptxbench-ncu-gpu1")  # ncu's lock folder is the device's own


def test_the_shared_ncu_lock_can_be_kept(monkeypatch):
    monkeypatch.setenv(runner.ENV_LOCK, "shared")
    assert runner.lock_env({"CUDA_VISIBLE_DEVICES": "0"}) == {"CUDA_VISIBLE_DEVICES": "0"}
    monkeypatch.delenv(runner.ENV_LOCK)
    assert "TMPDIR" not in runner.lock_env({"CUDA_VISIBLE_DEVICES": "0,1"})  # not one device: leave it


def test_a_replay_that_fails_before_ready_never_takes_the_gpu(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "crash_early")
    hold = Recorder()
    s = runner.profile_command(["replay"], counters=[], full=False, workdir=tmp_path / "w", hold=hold)
    assert not s.ok and "status 3" in s.error and hold.spans == []


def test_a_hanging_replay_is_killed_before_the_gpu_is_given_back(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "hang")
    hold = Recorder()
    start = time.monotonic()
    s = runner.profile_command(["replay"], counters=[], full=False, workdir=tmp_path / "w", hold=hold, timeout_s=1.5)
    assert not s.ok and "did not finish within 1.5 s" in s.error and time.monotonic() - start < 20
    assert len(hold.spans) == 1 and hold.spans[0][1] > 0  # taken, and given back after the kill


def test_a_replay_that_never_gets_ready_times_out(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "never_ready")
    hold = Recorder()
    s = runner.profile_command(["replay"], counters=[], full=False, workdir=tmp_path / "w", hold=hold, timeout_s=1.0)
    assert not s.ok and "not ready within 1 s" in s.error and hold.spans == []


def test_a_hold_that_fails_is_a_reason(fake_ncu, tmp_path):
    s = runner.profile_command(["replay"], counters=[], full=False, workdir=tmp_path / "w", hold=Recorder(fail=True))
    assert not s.ok and "could not be taken" in s.error and "pool closed" in s.error


def test_run_gated_without_a_hold_wait_keeps_phases(tmp_path):
    script = tmp_path / "child.py"
    script.write_text("import sys, time\nfrom pathlib import Path\nf = Path(sys.argv[1])\n(f / 'ready').write_text('')\n"
                      "while not (f / 'go').exists(): time.sleep(0.002)\n(f / 'done').write_text('')\n")
    folder = tmp_path / "h"
    rc, log, times = run_gated([sys.executable, str(script), str(folder)], env=None, folder=folder, hold=Recorder(),
                               limit_s=20)
    assert rc == 0 and times.ready_s is not None and times.held_s < 5 and times.phase == ""


def test_handshake_wait_times_out(tmp_path):
    h = Handshake(tmp_path)
    assert not h.wait("go", timeout_s=0.05)
    h.signal("go", "x")
    assert h.wait("go", timeout_s=0.05) and h.text("go") == "x"


# -- the pool's side: a named device, first come first served, and only that device held -----------------------
class Slot:
    def __init__(self, device):
        self.device = device


def test_slot_queue_hands_a_named_device_to_its_waiter_in_order():
    q = SlotQueue()
    zero, one = Slot(0), Slot(1)
    q.put(zero)
    got = []
    waiter = threading.Thread(target=lambda: got.append(q.get(1)))
    waiter.start()
    time.sleep(0.05)
    assert got == [] and q.get() is zero  # the waiter for device 1 does not take device 0
    q.put(one)
    waiter.join(2)
    assert got == [one] and q.qsize() == 0


def test_a_replay_names_the_free_gpu_else_the_one_fewest_replays_wait_for():
    class Slot:
        def __init__(self, device):
            self.device = device

    q, zero, one = SlotQueue(), Slot(0), Slot(1)
    q.put(one)  # device 0 is held, device 1 free
    assert q.least_loaded([0, 1], first=0) == 1
    assert q.get() is one  # both held now; two replays wait for device 0, none for device 1
    waiters = [threading.Thread(target=lambda: q.get(0)) for _ in range(2)]
    for t in waiters:
        t.start()
    wait_until(lambda: len(q._waiters) >= 2)  # both waiting
    assert q.least_loaded([0, 1], first=0) == 1 and q.least_loaded([0, 1], first=1) == 1
    q.put(zero)
    q.put(Slot(0))
    for t in waiters:
        t.join(2)
    assert q.least_loaded([0, 1], first=1) == 1  # nothing free, nobody waiting: round robin from device 1


def test_exclusive_holds_one_device_and_the_others_keep_running_jobs():
    from tests.tools.test_evaluate_local import AnsweringWorker

    def factory(device, config):
        w = AnsweringWorker(device, config)
        w.replies[0]["device_count"] = 2
        return w

    pool = GpuPool(PoolConfig(devices=[0, 1], spares=0), factory=factory).start()
    assert [pool.pick_device() for _ in range(4)] == [0, 1, 0, 1]
    with pool.exclusive(1) as device:
        assert device == 1 and pool.free.qsize() == 1
        done = []
        t = threading.Thread(target=lambda: done.append(pool.submit({"workload": "w", "cubin": b"", "plan": {}})))
        t.start()
        t.join(5)
        assert done and done[0].status == "PASSED"  # device 0 ran it while device 1 was held
    assert pool.free.qsize() == 2 and pool.held_s[1] > 0


def test_a_profile_after_the_timing_holds_its_gpu_at_the_evaluations_queue_priority(monkeypatch):
    """The replay of a passing kernel takes its GPU through pool.exclusive with the evaluation's priority (a replay
    whose hold raised reported 'the GPU could not be taken' and left the target verdicts unknown)."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    import ptxbench.tools.evaluate as ev_mod
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.tools.results import EvalResult

    held = []

    class Pool:
        def start(self):
            return self

        def pick_device(self):
            return 1

        @contextmanager
        def exclusive(self, device=None, priority=0.0, what=""):
            held.append((device, priority, what))
            yield device

    def fake_attach(result, options, source, comp, language, *, device, level, why, hold, sanitize_hold, measured, **kwargs):
        with hold() as d:
            result.profile_reason = f"replayed on {d}"
        return result

    monkeypatch.setattr(ev_mod, "attach", fake_attach)
    evaluator = LocalEvaluator(pool=Pool())
    result = EvalResult(workload="gemm_bf16_m8192_n7168_k5120", status="PASSED")
    solution = SimpleNamespace(source="", language="cuda")
    out = evaluator._attach_profile(result, EvalOptions(), "verdict", "first pass", solution, None, "sha", None, 7.5)
    assert held == [(1, 7.5, "gemm_bf16_m8192_n7168_k5120")] and out.profile_reason == "replayed on 1"
