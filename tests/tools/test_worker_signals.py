"""A stop from outside (Ctrl-C at the terminal, a scheduler's SIGTERM to the job's processes) is no verdict on the kernel
a GPU worker was running: the terminal's Ctrl-C reaches every process of its group, the workers too, and the bench
goes on to each trajectory's next model call, recording the evaluations in flight."""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time

import pytest

from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

sys.path.insert(0, os.path.dirname(__file__))
from test_gpu_pool import FakeWorker, job  # noqa: E402


def _serve_through_ctrl_c(conn, device_index, config, referee_conn=None):
    os.kill(os.getpid(), signal.SIGINT)  # the terminal's Ctrl-C, delivered to the whole foreground process group
    time.sleep(0.2)
    conn.send("still serving")


def _entry_point_with_serve_replaced(entry_point, conn):
    """The child's side: the real entry point, its serve loop replaced by a Ctrl-C to itself. The child is spawned, not
    forked: a fork of a test process with threads running (earlier tests' pools) could inherit a held lock and hang."""
    from ptxbench.tools.gpu import entry, referee, worker

    worker.serve = _serve_through_ctrl_c
    referee.serve = lambda conn, device: _serve_through_ctrl_c(conn, device, {})
    if entry_point == "main":
        entry.main(conn, 0, {}, None)
    else:
        entry.referee_main(conn, 0)


@pytest.mark.parametrize("entry_point", ["main", "referee_main"])
def test_the_gpu_worker_and_its_referee_outlive_the_terminals_ctrl_c(entry_point):
    """Killed by the KeyboardInterrupt of a Ctrl-C in the middle of a candidate, a worker came back as the candidate's
    RUNTIME_ERROR ('the GPU worker process died while running the candidate'), recorded in its turn; the bench's own
    stop ends the workers once the trajectories in flight have stopped."""
    # a test run started in the background by a non-interactive shell inherits SIGINT ignored: the worker must ignore
    # it whatever it inherits, so the test starts it from Python's default handler (the spawned interpreter installs
    # its own KeyboardInterrupt handler unless SIGINT arrives ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_entry_point_with_serve_replaced, args=(entry_point, child))
    try:
        proc.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    child.close()  # the child's end held here too would keep a dead child's pipe open until the poll's timeout
    try:
        assert parent.poll(60), "the child neither answered nor died"
        try:
            answer = parent.recv()
        except EOFError:
            answer = None
        assert answer == "still serving", f"the Ctrl-C ended the child (exit code {proc.join(10) or proc.exitcode})"
    finally:
        proc.join(10)
    assert proc.exitcode == 0


class KilledFromOutside(FakeWorker):
    signal = signal.SIGTERM

    @property
    def exitcode(self):
        return None if self._alive else -self.signal


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_worker_killed_from_outside_mid_candidate_is_infra_not_the_kernels_runtime_error(signum):
    KilledFromOutside.signal = signum
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: KilledFromOutside(d, c))
    try:
        res = pool.submit(job("die", 5))
    finally:
        pool.close()
    assert res.status == "INFRA_ERROR" and signal.Signals(signum).name in res.message


def test_a_worker_that_dies_of_its_candidate_is_still_its_runtime_error():
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: FakeWorker(d, c))  # exit code -9
    try:
        assert pool.submit(job("die", 5)).status == "RUNTIME_ERROR"
    finally:
        pool.close()


def test_a_referee_killed_from_outside_first_is_infra_too():
    """A scheduler's SIGTERM reaches the worker and its referee together; the referee seen dead first (the worker still
    alive, no exit code yet) was the candidate's RUNTIME_ERROR ('exit code None')."""
    from types import SimpleNamespace

    class RefereeKilled(FakeWorker):
        referee = SimpleNamespace(exitcode=-signal.SIGTERM)

        @property
        def exitcode(self):
            return None

    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: RefereeKilled(d, c))
    try:
        res = pool.submit(job("die", 5))
    finally:
        pool.close()
    assert res.status == "INFRA_ERROR" and "SIGTERM" in res.message
