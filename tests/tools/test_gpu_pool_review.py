"""The worker pool under failure, as a long bench meets it: a pool closed while a job runs (a second Ctrl-C, an actor's
close) starts no worker after it and blames no kernel; a referee lost under a live worker is the harness's; a spare
lost while it waited costs no job an INFRA_ERROR. Fake workers (tests/tools/test_gpu_pool.py), no GPU."""
from __future__ import annotations

import os
import sys
import threading

from ptxbench.tools.gpu.pool import GpuPool, NoGpuError, PoolConfig
from waits import wait_until

sys.path.insert(0, os.path.dirname(__file__))
from test_gpu_pool import FakeWorker, job  # noqa: E402


def test_a_pool_closed_while_a_job_runs_starts_no_worker_after_it_and_blames_no_kernel():
    """close() kills the worker under a running candidate (exit code -9, as its grace ran out): the job's verdict was
    the candidate's RUNTIME_ERROR, and its replacement (and a spare) started after the close, left running with GPU
    memory held, and a later call restarted the whole pool."""
    FakeWorker.started = []
    pool = GpuPool(PoolConfig(devices=[0], spares=1), factory=lambda d, c: FakeWorker(d, c))
    pool.start()
    got = []
    runner = threading.Thread(target=lambda: got.append(pool.submit(job("hang", 30))))
    runner.start()
    wait_until(lambda: pool.slots and pool.slots[0].active.jobs == 1)
    pool.close()
    runner.join(10)
    assert got and got[0].status == "INFRA_ERROR", got
    assert [w for w in FakeWorker.started if w.alive()] == []
    assert len(FakeWorker.started) == 2  # the active and its spare: nothing started after the close
    try:
        pool.start()
        raise AssertionError("a closed pool started again")
    except NoGpuError as exc:
        assert "closed" in str(exc)
    assert len(FakeWorker.started) == 2


def test_a_closed_pool_still_tells_its_gpus_limits_and_fingerprint():
    """An evaluation whose job ended as the pool closed still records the fingerprint of the GPU it ran on, without
    starting the workers again."""
    FakeWorker.started = []
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: FakeWorker(d, c)).start()
    pool.close()
    assert pool.fingerprint == {"gpu": "fake"} and pool.limits["sm_count"] == 132
    assert len(FakeWorker.started) == 1


def test_a_referee_lost_under_a_live_worker_is_the_harnesss_failure_not_the_kernels():
    """The referee runs no candidate code: lost while the worker still runs (the OOM killer picked it, a crash of its
    own), the job was the candidate's RUNTIME_ERROR 'exit code None'. The worker itself reports a referee gone as the
    harness's failure; the pool, seeing it first, does now too."""
    from types import SimpleNamespace

    class RefereeLost(FakeWorker):
        def __init__(self, device, config):
            super().__init__(device, config)
            self.referee = SimpleNamespace(exitcode=None)

        def send(self, msg):
            if msg.get("workload") != "referee_lost":
                return super().send(msg)
            self.outbox.put({"type": "phase", "id": msg["id"], "phase": "run", "limit_s": 30})
            self.referee.exitcode = -9
            self._alive = False  # alive() is worker and referee alive: the worker process itself still runs

        @property
        def exitcode(self):
            return None  # the worker process has not exited

    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: RefereeLost(d, c))
    try:
        res = pool.submit(job("referee_lost", 30))
    finally:
        pool.close()
    assert res.status == "INFRA_ERROR" and "referee" in res.message, res


def test_a_spare_lost_before_its_hello_costs_the_next_job_nothing():
    """The active worker and its hot spare lost while idle (the OOM killer takes several processes under memory
    pressure; a spare's start that broke): the next job took the spare, and its missing hello made the job
    INFRA_ERROR, a trajectory's retry spent on a worker it never used. A fresh worker is started instead (only a fresh
    one that fails says the GPU cannot be used)."""
    class DiesBeforeHello(FakeWorker):
        def recv(self, timeout):
            return None

        def alive(self):
            return False

        @property
        def exitcode(self):
            return -9

    made = []

    def factory(d, c):
        made.append(DiesBeforeHello(d, c) if len(made) == 1 else FakeWorker(d, c))  # the first spare dies
        return made[-1]

    pool = GpuPool(PoolConfig(devices=[0], spares=1), factory=factory)
    try:
        pool.start()
        made[0]._alive = False  # the idle active worker killed
        after = pool.submit(job("ok", 5))
        assert after.status == "PASSED", after
    finally:
        pool.close()
    assert not any(w.alive() for w in made)


def test_a_replacement_that_keeps_failing_is_said_once_not_retried_forever():
    """The fresh worker tried after a lost spare fails too (the GPU is gone): the job is told, no loop of starts."""
    made = []

    def factory(d, c):
        made.append(FakeWorker(d, c, fail_start=len(made) >= 2))  # the active and its spare start; nothing after
        return made[-1]

    pool = GpuPool(PoolConfig(devices=[0], spares=1), factory=factory)
    try:
        assert pool.submit(job("fault", 5)).status == "RUNTIME_ERROR"  # the spare takes over; its own spare fails
        assert pool.submit(job("fault", 5)).status == "RUNTIME_ERROR"  # the failed spare, then a fresh one: both fail
        after = pool.submit(job("ok", 5))
        assert after.status == "INFRA_ERROR" and "no GPU here" in after.message
    finally:
        pool.close()
    assert len(made) < 12
