"""The GPU queue's order (tools/gpu/priority.py, slots.py): the evaluations with the most GPU work left behind them
first, equal priorities in arrival order; and the evaluator passing each evaluation's priority to the pool."""
from __future__ import annotations

import threading

from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig
from ptxbench.tools.gpu.priority import QueuePriority
from ptxbench.tools.gpu.slots import SlotQueue
from tests.tools.test_evaluate_local import CORPUS, WORKLOAD, AnsweringWorker
from waits import wait_until


class TimedWorker(AnsweringWorker):
    """Answers as the real worker does, holding its GPU 0.5 s an evaluation by its own count."""

    def send(self, msg):
        super().send(msg)
        if msg.get("type") == "evaluate":
            self.replies[-1]["result"]["seconds"]["gpu_total"] = 0.5


class Slot:
    def __init__(self, device: int):
        self.device = device


def _until_waiting(q: SlotQueue, n: int) -> None:
    """Until `n` threads wait in the queue (a thread started is not yet a waiter on a loaded machine)."""
    wait_until(lambda: len(q._waiters) >= n)


def test_waiters_are_served_highest_priority_first_then_in_arrival_order():
    q, gpu = SlotQueue(), Slot(0)
    served: list[str] = []

    def wait(name: str, priority: float):
        q.get(priority=priority)
        served.append(name)
        q.put(gpu)

    threads = []
    for name, priority in (("light", 1.0), ("heavy", 9.0), ("middle", 4.0), ("heavy-later", 9.0), ("none", 0.0)):
        threads.append(threading.Thread(target=wait, args=(name, priority)))
        threads[-1].start()
        _until_waiting(q, len(threads))  # arrival order
    q.put(gpu)
    for t in threads:
        t.join(2)
    assert served == ["heavy", "heavy-later", "middle", "light", "none"]


def test_priority_is_turns_left_times_what_an_evaluation_of_the_workload_holds_a_gpu_for():
    p = QueuePriority()
    assert p.of("gemm", None) == 0.0  # a single evaluation: no trajectory behind it
    assert p.of("gemm", 3) == 4.0  # nothing learnt yet: one second an evaluation
    p.learn("gemm", 2.0)
    p.learn("attn", 6.0)
    assert p.of("gemm", 7) == 16.0 and p.of("attn", 7) == 48.0
    assert p.cost("unseen") == 4.0  # the mean of what is known
    p.learn("attn", 12.0)  # a moving average: the newest weighs 0.3
    assert abs(p.cost("attn") - (0.7 * 6.0 + 0.3 * 12.0)) < 1e-9
    p.learn("attn", 0.0)  # an evaluation that never reached the GPU teaches nothing
    assert abs(p.cost("attn") - 7.8) < 1e-9


def test_the_evaluator_queues_each_evaluation_with_its_trajectorys_work_left(monkeypatch):
    pool = GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: TimedWorker(d, c))
    asked: list[float] = []
    real = pool.submit
    monkeypatch.setattr(pool, "submit", lambda job, priority=0.0: (asked.append(priority), real(job, priority))[1])
    ev = LocalEvaluator(pool)
    ev.early_profiles = False
    source = CORPUS["control_correct"]["source"]
    ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, profile_on_pass=False))
    ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, profile_on_pass=False, turns_left=4))
    assert asked[0] == 0.0  # a single evaluation
    assert asked[1] == 5 * 0.5  # itself and 4 turns behind it, 0.5 s each (learnt from the first's gpu_total)
    ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, profile_on_pass=False, turns_left=1))
    assert asked[2] == 2 * 0.5  # fewer turns behind it: served after a trajectory with more left
    ev.close()


def test_a_freed_gpu_goes_to_the_request_that_named_it_before_any_gpu_jobs():
    """A replay pinned to GPU 1 (low priority) and a job for any GPU (high priority) wait; GPU 1 frees: the replay
    takes it (the job can take the next GPU that frees), so no GPU idles while the replay waits."""
    q, one = SlotQueue(), Slot(1)
    served: list[str] = []
    replay = threading.Thread(target=lambda: (q.get(1, priority=1.0), served.append("replay")))
    job = threading.Thread(target=lambda: (q.get(priority=2.0), served.append("job")))
    replay.start()
    _until_waiting(q, 1)
    job.start()
    _until_waiting(q, 2)
    q.put(one)
    replay.join(2)
    assert served == ["replay"]
    q.put(Slot(0))
    job.join(2)
    assert served == ["replay", "job"]


def test_the_evaluator_takes_no_gpu_work_once_closed():
    ev = LocalEvaluator(GpuPool(PoolConfig(devices=[0], spares=0), factory=lambda d, c: TimedWorker(d, c)))
    ev.close()
    r = ev.evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(trials=1))
    assert r.status == "INFRA_ERROR" and "closed" in r.message
