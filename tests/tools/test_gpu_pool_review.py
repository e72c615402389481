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


def test_a_gpu_whose_worker_cannot_start_again_does_not_swallow_the_other_gpus_jobs():
    """A GPU lost mid-run (fallen off the bus: its worker cannot start any more) answered each job sent to it at once
    with INFRA_ERROR and was free again at once, so it took most jobs while the healthy GPU was busy: every trajectory's
    retries spent in minutes. A job whose worker cannot start (nothing of it ran) goes to another GPU, and the lost one
    waits out a pause before it is tried again."""
    broken = {"device1": False}

    def factory(d, c):
        return FakeWorker(d, c, fail_start=d == 1 and broken["device1"])

    pool = GpuPool(PoolConfig(devices=[0, 1], spares=0), factory=factory)
    try:
        pool.start()
        broken["device1"] = True
        dev1 = next(s for s in pool.slots if s.device == 1)
        dev1.active._alive = False  # its worker lost while idle; no new one starts there
        results = []
        threads = [threading.Thread(target=lambda: results.append(pool.submit(job("ok", 5)))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert [r.status for r in results] == ["PASSED"] * 8, [r.message for r in results]
    finally:
        pool.close()


def test_a_job_is_infra_error_when_no_gpu_can_start_a_worker():
    """Every GPU lost: the job is told (INFRA_ERROR naming why), not passed around forever."""
    broken = {"on": False}
    pool = GpuPool(PoolConfig(devices=[0, 1], spares=0), factory=lambda d, c: FakeWorker(d, c, fail_start=broken["on"]))
    try:
        pool.start()
        broken["on"] = True
        for slot in pool.slots:
            slot.active._alive = False
        res = pool.submit(job("ok", 5))
        assert res.status == "INFRA_ERROR" and "no GPU here" in res.message
    finally:
        pool.close()


def test_a_paused_gpu_takes_jobs_again_after_its_pause():
    """A GPU whose worker could not start once (host memory short at that moment) is not given up for the run."""
    broken = {"device1": False}
    made = []

    def factory(d, c):
        made.append(FakeWorker(d, c, fail_start=d == 1 and broken["device1"]))
        return made[-1]

    pool = GpuPool(PoolConfig(devices=[0, 1], spares=0, lost_gpu_pause_s=0.2), factory=factory)
    try:
        pool.start()
        dev1 = next(s for s in pool.slots if s.device == 1)
        broken["device1"] = True
        dev1.active._alive = False
        dev0 = next(s for s in pool.slots if s.device == 0)
        with pool.exclusive(0):  # device 0 busy: the job meets device 1's failed start, then waits for device 0
            got = []
            runner = threading.Thread(target=lambda: got.append(pool.submit(job("ok", 5))))
            runner.start()
            wait_until(lambda: 1 in pool._paused)
        runner.join(10)
        assert got[0].status == "PASSED" and dev0.jobs == 1
        broken["device1"] = False
        wait_until(lambda: 1 not in pool._paused and pool.free.qsize() == 2)
        with pool.exclusive(0):
            assert pool.submit(job("ok", 5)).status == "PASSED" and dev1.jobs == 1  # device 1 back in service
    finally:
        pool.close()


def test_a_worker_lost_between_its_check_and_the_jobs_send_costs_the_job_nothing():
    """The worker died after the pool saw it alive and before the job reached it (its pipe broken): the evaluation
    raised BrokenPipeError, a harness crash the trajectory spent a retry on. Nothing of the job ran: its replacement
    runs it."""
    class GoneAtSend(FakeWorker):
        def send(self, msg):
            if msg.get("type") == "evaluate":
                self._alive = False
                raise BrokenPipeError(32, "Broken pipe")
            return super().send(msg)

    made = []

    def factory(d, c):
        made.append(GoneAtSend(d, c) if not made else FakeWorker(d, c))
        return made[-1]

    pool = GpuPool(PoolConfig(devices=[0], spares=1), factory=factory)
    try:
        res = pool.submit(job("ok", 5))
        assert res.status == "PASSED" and res.runtime_error == f"worker {id(made[1])}"
        assert made[1].jobs == 1 and pool.slots[0].jobs == 1
    finally:
        pool.close()


def _start_a_worker_and_wait(report, wrapped: bool) -> None:
    """The bench's side, in a process of its own: a forkserver child that hangs (a candidate's kernel spinning), its pid
    reported, then this process waits to be killed."""
    import multiprocessing as mp
    import time

    from ptxbench.tools.gpu import pool as pool_module

    ctx = mp.get_context("forkserver")
    lifeline, keep = ctx.Pipe(duplex=False)
    target, args = (pool_module._dies_with_the_bench, (lifeline, time.sleep, 120)) if wrapped else (time.sleep, (120,))
    child = ctx.Process(target=target, args=args, daemon=False)
    child.start()
    report.send(child.pid)
    time.sleep(120)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # dead, waiting to be reaped
    except FileNotFoundError:
        return True


def test_a_worker_hung_in_its_kernel_dies_with_a_bench_killed_outright():
    """A bench killed outright (SIGKILL: a scheduler's grace run out, the OOM killer's pick) closes no pool: its idle
    workers see their pipe close and exit, but one hung in a candidate's kernel read no pipe and spun on its GPU for
    good, beside the next run's timings. A worker dies with the bench (the pool's lifeline pipe ends)."""
    import multiprocessing as mp
    import signal as signals
    import time

    if not sys.platform.startswith("linux"):
        return
    ctx = mp.get_context("spawn")
    parent_end, child_end = ctx.Pipe()
    bench = ctx.Process(target=_start_a_worker_and_wait, args=(child_end, True))
    bench.start()
    worker = None
    try:
        assert parent_end.poll(60)
        worker = parent_end.recv()
        os.kill(bench.pid, signals.SIGKILL)
        bench.join(10)
        wait_until(lambda: _gone(worker), timeout=20)
        assert _gone(worker), "the hung worker outlived its bench"
    finally:
        if worker is not None and not _gone(worker):
            os.kill(worker, signals.SIGKILL)


def test_the_pools_workers_and_referees_hold_its_lifeline_and_closing_it_ends_them():
    """Both processes of every worker the pool starts get the read end of its lifeline; close() ends the pipe, so
    a worker deaf to its exit message (hung in a kernel) dies too."""
    import multiprocessing as mp

    from ptxbench.tools.gpu import pool as pool_module

    started = []

    class Ctx:
        def Pipe(self, duplex=True):
            return FakeEnd(), FakeEnd()

        def Process(self, target, args, daemon, name):
            started.append((target, args[0]))
            return FakeProcess()

    lifeline = FakeEnd()
    pool_module.WorkerProcess(Ctx(), 0, {}, lifeline)
    assert started == [(pool_module._dies_with_the_bench, lifeline)] * 2
    real = GpuPool(PoolConfig(devices=[0], start_method="spawn"))  # started by no call: no process is made
    writer = real._lifeline
    assert isinstance(writer, mp.connection.Connection) and not writer.closed
    real.close()
    assert writer.closed


class FakeEnd:
    def close(self):
        """Nothing open."""


class FakeProcess:
    def start(self):
        """Nothing to start."""


def test_a_profiler_replay_is_not_sent_to_a_gpu_held_back_after_its_worker_could_not_start():
    """pick_device names the GPU a profiler replay will wait for: never one held back (its pause would be the
    replay's wait, and its GPU likely lost), while another can take it."""
    broken = {"device1": False}
    pool = GpuPool(PoolConfig(devices=[0, 1], spares=0),
                   factory=lambda d, c: FakeWorker(d, c, fail_start=d == 1 and broken["device1"]))
    try:
        pool.start()
        broken["device1"] = True
        next(s for s in pool.slots if s.device == 1).active._alive = False
        with pool.exclusive(0):
            got = []
            runner = threading.Thread(target=lambda: got.append(pool.submit(job("ok", 5))))
            runner.start()
            wait_until(lambda: 1 in pool._paused)
            assert {pool.pick_device() for _ in range(4)} == {0}
        runner.join(10)
    finally:
        pool.close()


def test_a_worker_the_oom_killer_ends_mid_candidate_is_infra_not_the_kernels_runtime_error(monkeypatch):
    """Host memory short under a long bench (compilers, profilers, the trajectories' own state): the kernel's
    out-of-memory killer ends the GPU worker with SIGKILL while it runs some candidate. That was the candidate's
    RUNTIME_ERROR ('died ... exit code -9'), fed back to its model and scored; the host counts its OOM kills
    (/proc/vmstat oom_kill), so a SIGKILL the count went up under is the harness's INFRA_ERROR, retried."""
    from ptxbench.tools.gpu import pool as pool_module

    kills = iter([7, 8, 8, 8])  # one OOM kill during the first job, none during the second
    monkeypatch.setattr(pool_module, "_oom_kills", lambda: next(kills))
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: FakeWorker(d, c))  # dies with -9
    try:
        res = pool.submit(job("die", 5))
        assert res.status == "INFRA_ERROR" and "out-of-memory" in res.message, res
        assert pool.submit(job("die", 5)).status == "RUNTIME_ERROR"  # no OOM kill: still its candidate's
    finally:
        pool.close()


def test_close_stops_a_worker_whose_referee_died_before_the_pool_noticed():
    """A worker seen not alive (its referee gone) but not yet replaced is still a process on the GPU: close() stops it
    however many workers started elsewhere meanwhile."""
    FakeWorker.started = []
    pool = GpuPool(PoolConfig(devices=[0, 1], spares=0), factory=lambda d, c: FakeWorker(d, c)).start()
    half_dead = next(s for s in pool.slots if s.device == 0).active
    half_dead._alive = False  # alive() is worker and referee alive: the referee's end is enough
    with pool.exclusive(0):
        assert pool.submit(job("fault", 5)).status == "RUNTIME_ERROR"  # on device 1: its worker replaced
    pool.close()
    assert all(w.killed for w in FakeWorker.started) and len(FakeWorker.started) == 3
