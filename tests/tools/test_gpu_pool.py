"""The worker pool's replacement and watchdog logic, with fake workers (no GPU, no torch in the parent)."""
from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time

import pytest

from ptxbench.tools.gpu import pool as pool_module
from ptxbench.tools.gpu.messages import GpuJob
from ptxbench.tools.gpu.pool import GpuPool, NoGpuError, PoolConfig
from waits import wait_until

HELLO = {"type": "hello", "limits": {"sm_count": 132, "name": "fake"}, "fingerprint": {"gpu": "fake"}, "device_count": 2,
         "startup_s": 2.5, "startup_phases": {"imports": 0.1, "context": 1.2, "limits": 0.1, "warm_up": 0.9,
                                              "state": 0.0, "fingerprint": 0.2}}


class FakeWorker:
    """Speaks the worker protocol; the job's workload names what it does: ok | fault | hang | die | slow_prepare."""

    started: list["FakeWorker"] = []

    def __init__(self, device: int, config: dict, fail_start: bool = False):
        self.device, self.config = device, config
        self.inbox: queue.Queue = queue.Queue()
        self.outbox: queue.Queue = queue.Queue()
        self.hello = None
        self._alive = True
        self.killed = False
        self.jobs = 0
        self.outbox.put({"type": "hello", "error": "no GPU here"} if fail_start else HELLO)
        FakeWorker.started.append(self)

    def send(self, msg: dict) -> None:
        if msg.get("type") == "exit":
            self._alive = False
            return
        if msg.get("type") == "ping":
            self.outbox.put({"type": "pong", "cache": {"entries": 0}})
            return
        self.jobs += 1
        behave = msg["workload"]
        job_id = msg["id"]
        if behave == "slow_prepare":
            self.outbox.put({"type": "phase", "id": job_id, "phase": "prepare", "limit_s": 0.2})
            return
        if behave == "die_preparing":  # e.g. the host's OOM killer while inputs are drawn: no candidate loaded yet
            self.outbox.put({"type": "phase", "id": job_id, "phase": "prepare", "limit_s": 900})
            self._alive = False
            return
        self.outbox.put({"type": "phase", "id": job_id, "phase": "run", "limit_s": msg["timeout_s"]})
        if behave == "hang":
            return
        if behave == "die":
            self._alive = False
            return
        status, replace = ("RUNTIME_ERROR", True) if behave == "fault" else ("PASSED", False)
        self.outbox.put({"type": "result", "id": job_id, "replace": replace,
                         "result": {"status": status, "runtime_error": f"worker {id(self)}"}})
        if replace:
            self._alive = False

    def recv(self, timeout: float):
        try:
            return self.outbox.get(timeout=timeout)
        except queue.Empty:
            return None

    def alive(self) -> bool:
        return self._alive

    @property
    def exitcode(self):
        return None if self._alive else -9

    def kill(self) -> None:
        self.killed = True
        self._alive = False

    def stop(self, grace_s: float = 0.0) -> None:
        self.kill()


def job(behave: str, timeout_s: float) -> GpuJob:
    return GpuJob(workload=behave, timeout_s=timeout_s)


def make_pool(devices=None, spares=1, **kw) -> GpuPool:
    FakeWorker.started = []
    return GpuPool(PoolConfig(devices=devices, spares=spares, **kw), factory=lambda d, c: FakeWorker(d, c))


def test_pool_starts_one_worker_per_device_plus_spares():
    pool = make_pool(spares=1).start()
    assert [s.device for s in pool.slots] == [0, 1]  # device_count from the first hello
    assert len(FakeWorker.started) == 4
    assert pool.limits["sm_count"] == 132
    pool.close()
    assert all(w.killed for w in FakeWorker.started)


def test_a_gpu_that_reaches_host_memory_takes_no_candidate_unless_allowed(monkeypatch):
    """HMM / ATS: a candidate's kernel can read and write the worker's host memory, and so rewrite what the worker runs.
    The pool refuses to start, naming the way out, and starts no worker; with the user's explicit allowance it starts
    and warns once; a GPU without it starts silently."""
    import warnings

    monkeypatch.delenv(pool_module.ALLOW_PAGEABLE_ENV, raising=False)
    monkeypatch.setitem(HELLO, "limits", {**HELLO["limits"], "pageable_memory_access": True})
    pool = make_pool(spares=0)
    with pytest.raises(pool_module.NoGpuError, match="uvm_disable_hmm=1.*PTXBENCH_ALLOW_PAGEABLE_MEMORY=1"):
        pool.start()
    assert FakeWorker.started and all(w.killed for w in FakeWorker.started)
    with pytest.warns(pool_module.PageableMemoryWarning, match="uvm_disable_hmm=1"):
        make_pool(spares=0, allow_pageable_memory=True).start().close()
    monkeypatch.setenv(pool_module.ALLOW_PAGEABLE_ENV, "1")
    with pytest.warns(pool_module.PageableMemoryWarning):
        make_pool(spares=0).start().close()
    monkeypatch.setitem(HELLO, "limits", {**HELLO["limits"], "pageable_memory_access": False})
    monkeypatch.delenv(pool_module.ALLOW_PAGEABLE_ENV)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pool_module.PageableMemoryWarning)
        make_pool(spares=0).start().close()


def test_the_pool_records_each_active_workers_start_and_its_phases():
    pool = make_pool(spares=1).start()
    assert [w["device"] for w in pool.startup] == [0, 1]  # the actives; a spare is awaited when it takes over
    assert all(w["phases"] == HELLO["startup_phases"] and w["in_worker_s"] == HELLO["startup_s"] for w in pool.startup)
    assert all(0 <= w["ready_after_s"] < 5 for w in pool.startup)
    pool.close()


def test_parent_side_never_imports_torch():
    code = ("import sys, ptxbench.tools.gpu.pool, ptxbench.tools.evaluate, ptxbench.agent.cli.cmd_eval; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_fault_replaces_worker_with_spare_and_next_job_runs_on_a_fresh_one():
    pool = make_pool(devices=[0], spares=1)
    first = pool.submit(job("ok", 5))
    assert first.status == "PASSED"
    slot = pool.slots[0]
    old = slot.active
    spare = slot.spares[0]
    fault = pool.submit(job("fault", 5))
    assert fault.status == "RUNTIME_ERROR"
    assert old.killed and slot.active is spare and slot.replacements == 1
    assert len(slot.spares) == 1 and slot.spares[0] is not spare  # a new spare is on its way
    after = pool.submit(job("ok", 5))
    assert after.status == "PASSED" and after.runtime_error == f"worker {id(spare)}"
    pool.close()


def test_hang_is_timeout_and_worker_is_killed(monkeypatch):
    monkeypatch.setattr(pool_module, "MIN_CANDIDATE_LIMIT_S", 0.1)
    pool = make_pool(devices=[0], spares=1)
    t0 = time.monotonic()
    res = pool.submit(job("hang", 0.3))
    assert res.status == "TIMEOUT" and "0.3" in res.message
    assert time.monotonic() - t0 < 3
    assert FakeWorker.started[0].killed
    assert pool.submit(job("ok", 5)).status == "PASSED"
    pool.close()


def test_dead_worker_is_runtime_error_and_replaced():
    pool = make_pool(devices=[0], spares=0)
    res = pool.submit(job("die", 5))
    assert res.status == "RUNTIME_ERROR" and "died" in res.message
    assert "replaced" not in res.message  # the harness's own bookkeeping: the model reads the message
    assert pool.submit(job("ok", 5)).status == "PASSED"
    assert pool.slots[0].replacements == 1
    pool.close()


def test_a_worker_that_dies_before_its_candidate_is_loaded_is_the_harnesss_failure():
    """Before the `load` phase no code of this job's candidate is in the worker: its death is not the kernel's."""
    pool = make_pool(devices=[0], spares=0)
    res = pool.submit(job("die_preparing", 5))
    assert res.status == "INFRA_ERROR" and "before the candidate was loaded" in res.message
    assert pool.submit(job("ok", 5)).status == "PASSED"
    pool.close()


def test_stalled_preparation_is_infra_error_not_timeout():
    pool = make_pool(devices=[0], spares=0)
    res = pool.submit(job("slow_prepare", 5))
    assert res.status == "INFRA_ERROR"
    pool.close()


def test_no_gpu_is_a_clear_error():
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: FakeWorker(d, c, fail_start=True))
    try:
        pool.start()
    except NoGpuError as e:
        assert "no GPU here" in str(e)
    else:
        raise AssertionError("expected NoGpuError")


def test_jobs_queue_one_at_a_time_per_gpu():
    pool = make_pool(devices=[0], spares=0)
    results = []
    threads = [threading.Thread(target=lambda: results.append(pool.submit(job("ok", 5))))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status for r in results] == ["PASSED"] * 6
    assert pool.slots[0].jobs == 6
    health = pool.ping()
    assert health[0]["ok"] and health[0]["jobs"] == 6
    pool.close()


def test_candidate_limit_has_a_floor_for_slow_fault_reports():
    pool = make_pool(devices=[0], spares=0)
    t0 = time.monotonic()
    res = pool.submit(job("hang", 0.1))
    waited = time.monotonic() - t0
    assert res.status == "TIMEOUT" and waited >= pool_module.MIN_CANDIDATE_LIMIT_S
    pool.close()


def test_a_worker_that_dies_before_hello_is_named_as_such():
    class DiesAtStart(FakeWorker):
        def recv(self, timeout: float):
            self._alive = False
            return None

        @property
        def exitcode(self):
            return 1

    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: DiesAtStart(d, c))
    try:
        pool.start()
    except NoGpuError as e:
        assert "exited with code 1 before it started" in str(e)
    else:
        raise AssertionError("expected NoGpuError")


class RecordingWorker(FakeWorker):
    events: list = []

    def __init__(self, device: int, config: dict, fail_start: bool = False):
        RecordingWorker.events.append(("spawn", device))
        super().__init__(device, config, fail_start)

    def recv(self, timeout: float):
        msg = super().recv(timeout)
        if msg and msg.get("type") == "hello":
            RecordingWorker.events.append(("hello", self.device))
        return msg


def test_every_gpu_worker_starts_at_once_when_the_gpus_are_known(monkeypatch):
    """Known from CUDA_VISIBLE_DEVICES or nvidia-smi, the second GPU's worker does not wait for the first's start-up."""
    monkeypatch.setattr(pool_module, "visible_devices", lambda: [0, 1])
    RecordingWorker.events, FakeWorker.started = [], []
    pool = GpuPool(PoolConfig(spares=1), factory=lambda d, c: RecordingWorker(d, c)).start()
    assert RecordingWorker.events[:3] == [("spawn", 0), ("spawn", 1), ("hello", 0)]
    assert [s.device for s in pool.slots] == [0, 1] and len(FakeWorker.started) == 4
    pool.close()


def test_a_guessed_gpu_the_worker_does_not_see_is_dropped(monkeypatch):
    monkeypatch.setattr(pool_module, "visible_devices", lambda: [0, 1, 2])  # the fake worker reports 2 devices
    pool = make_pool(spares=0).start()
    assert [s.device for s in pool.slots] == [0, 1]
    assert [w.killed for w in FakeWorker.started] == [False, False, True]
    pool.close()


def test_a_first_worker_that_cannot_start_takes_the_others_down(monkeypatch):
    monkeypatch.setattr(pool_module, "visible_devices", lambda: [0, 1])
    FakeWorker.started = []
    pool = GpuPool(PoolConfig(spares=0), factory=lambda d, c: FakeWorker(d, c, fail_start=True))
    try:
        pool.start()
    except NoGpuError as exc:
        assert "no GPU here" in str(exc)
    else:
        raise AssertionError("the pool started without a GPU")
    assert len(FakeWorker.started) == 2 and all(w.killed for w in FakeWorker.started)


def test_visible_devices_reads_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert pool_module.visible_devices() == [0, 1]  # indices as the worker numbers them
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert pool_module.visible_devices() is None


def test_start_from_several_threads_starts_the_workers_once():
    """The bench starts the pool on a thread of its own while trajectories may already ask for a GPU."""
    pool = make_pool(devices=[0, 1], spares=1)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(pool.start())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert got == [pool] * 4 and len(FakeWorker.started) == 4  # two actives and two spares, once
    pool.close()


def test_a_failed_start_fails_every_later_call_at_once():
    FakeWorker.started = []
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: FakeWorker(d, c, fail_start=True))
    for _ in range(2):
        try:
            pool.start()
            raise AssertionError("started without a GPU")
        except NoGpuError as e:
            assert "no GPU here" in str(e)
    assert len(FakeWorker.started) == 1  # not retried: the second call got the first one's error


def test_a_start_that_breaks_midway_leaves_no_worker_running_and_says_why():
    """Any failure while starting (here: the third process cannot be spawned) kills what was started, and later
    calls get the same error at once instead of starting a second set over the first."""
    FakeWorker.started = []
    spawns = []

    def factory(device, config):
        spawns.append(device)
        if len(spawns) == 3:
            raise OSError("no more processes")
        return FakeWorker(device, config)

    pool = GpuPool(PoolConfig(devices=[0, 1], spares=1), factory=factory)
    for _ in range(2):
        try:
            pool.start()
            raise AssertionError("started")
        except NoGpuError as e:
            assert "OSError: no more processes" in str(e)
    assert len(spawns) == 3 and all(w.killed for w in FakeWorker.started) and pool.slots == []


def test_closing_during_a_background_start_leaves_nothing_running():
    class SlowHello(FakeWorker):
        def recv(self, timeout):
            if self.hello is None:
                time.sleep(0.2)
            return super().recv(timeout)

    FakeWorker.started = []
    pool = GpuPool(PoolConfig(devices=[0, 1], spares=1), factory=lambda d, c: SlowHello(d, c))
    starter = threading.Thread(target=pool.start)
    starter.start()
    wait_until(lambda: FakeWorker.started)  # the start is in progress: its first worker spawned
    pool.close()  # waits for the start in progress, then stops every worker it made
    starter.join(5)
    assert len(FakeWorker.started) == 4 and all(not w.alive() for w in FakeWorker.started) and pool.slots == []


def test_the_pool_records_how_long_a_worker_process_took_to_start_running():
    """A worker says when (wall clock) its own code began; the pool keeps the time before it (the forkserver, the
    preload, the fork), the part of the start its phases do not cover."""
    class Timed(FakeWorker):
        def __init__(self, device, config):
            super().__init__(device, config)
            self.outbox = queue.Queue()
            self.outbox.put({**HELLO, "started_at": time.time() + 0.25})  # as if its process took 0.25 s to start

    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: Timed(d, c)).start()
    (entry,) = pool.startup
    assert 0.2 <= entry["process_start_s"] <= 1.0
    pool.close()
    plain = make_pool(devices=[0], spares=0).start()  # a worker that does not say: nothing made up
    assert "process_start_s" not in plain.startup[0]
    plain.close()


def test_a_verdict_stands_when_its_replacement_worker_cannot_start(monkeypatch):
    """A hang is the candidate's TIMEOUT even when no replacement worker starts after it; the next job is the one
    told that the GPU cannot be used (INFRA_ERROR), and the hang's verdict is not turned into the harness's."""
    monkeypatch.setattr(pool_module, "MIN_CANDIDATE_LIMIT_S", 0.1)
    started = [0]

    def factory(d, c):
        started[0] += 1
        return FakeWorker(d, c, fail_start=started[0] > 1)  # the first worker starts, no later one does

    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=factory)
    try:
        assert pool.submit(job("hang", 0.3)).status == "TIMEOUT"
        after = pool.submit(job("ok", 5))
        assert after.status == "INFRA_ERROR" and "no GPU here" in after.message
    finally:
        pool.close()
