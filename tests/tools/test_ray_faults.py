"""RayEvaluator's handling of a cluster that fails under it, without Ray: a fake `ray` module whose calls fail the way
Ray's do. Only an exception the evaluation raised inside a live actor (RayTaskError) is the evaluation's; anything
else Ray's calls raise is the infrastructure's: INFRA_ERROR, retried by the bench, never a verdict on the kernel."""
from __future__ import annotations

import sys
import threading
import types

import pytest

from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.ray_evaluator import GpuEvaluatorActor as REAL_ACTOR
from ptxbench.tools.results import EvalResult

WL = "smoke_gemm_bf16_m256_n256_k512"


class RayError(Exception):
    """Ray's base exception (ray.exceptions.RayError): an actor that died, a lost object, a failed placement."""


class RayTaskError(RayError):
    def __init__(self, cause):
        super().__init__(str(cause))
        self.cause = cause


class RayActorError(RayError):
    """Ray's actor outage (ray.exceptions.RayActorError): ActorDiedError and ActorUnavailableError are its subclasses."""


class ActorDiedError(RayActorError):
    """What Ray raises for a call to an actor whose process or node died, in flight or sent afterwards."""


class _Ref:
    def __init__(self, call):
        self.call = call


fake_ray_pending: dict = {}  # nodes that are not up yet -> the event of their coming up


class _Method:
    """A call on an actor of a dead node fails, as does one in flight when its node dies (its answer never comes)."""

    def __init__(self, fn, handle=None):
        self.fn, self.handle = fn, handle

    def remote(self, *args):
        def call():
            dead = self.handle is not None and self.handle.dead
            if self.handle is not None and self.handle.node in fake_ray_pending:
                fake_ray_pending[self.handle.node].wait(30)  # not placed yet: no answer until it is
            if dead():
                raise ActorDiedError(f"The actor died because its node has died. Node Id: {self.handle.node}")
            answer = self.fn(*args)
            if dead():
                raise ActorDiedError(f"The actor died because its node has died. Node Id: {self.handle.node}")
            return answer
        return _Ref(call)


class FakeRay(types.ModuleType):
    """Actors run in the calling thread; `fail_get` (an exception) is what every ray.get raises meanwhile. The n-th
    actor started runs on node `place(n)`; a node in `dead_nodes` fails every call on its actors."""

    def __init__(self, gpus: int = 1):
        super().__init__("ray")
        self.exceptions = types.SimpleNamespace(RayError=RayError, RayTaskError=RayTaskError,
                                                RayActorError=RayActorError, ActorDiedError=ActorDiedError)
        self.gpus, self.fail_get, self.fail_remote = gpus, None, None
        self.started = 0
        self.killed: list = []  # the actor handles ray.kill was given, in order
        self.place = lambda n: "node0"
        self.dead_nodes: set = set()
        self.lock = threading.Lock()
        self.exited = 0

        def exit_actor():  # inside an actor method: the call ends, and its caller sees the actor died
            self.exited += 1
            raise ActorDiedError("The actor is dead because its worker process exited (exit_actor)")

        self.actor = types.SimpleNamespace(exit_actor=exit_actor)

    def is_initialized(self):
        return True

    def cluster_resources(self):
        return {"GPU": self.gpus}

    def remote(self, **_):
        fake = self

        def wrap(cls):
            class Handle:
                def __init__(self, node):
                    self.node = node
                    self.obj = cls()
                    self.obj.node = node  # an actor class of a test may read where it runs
                    self.evaluate, self.where, self.close = (_Method(self.obj.evaluate, self),
                                                             _Method(lambda: {"node_id": node}, self),
                                                             _Method(lambda: None))

                def dead(self):
                    return self.node in fake.dead_nodes

            class ActorClass:
                @staticmethod
                def remote():
                    if fake.fail_remote is not None:
                        raise fake.fail_remote
                    with fake.lock:
                        fake.started += 1
                        n = fake.started - 1
                    return Handle(fake.place(n))

            return ActorClass
        return wrap

    def get(self, refs, timeout=None):
        if self.fail_get is not None:
            raise self.fail_get
        if isinstance(refs, list):
            return [r.call() for r in refs]
        return refs.call()

    def kill(self, actor):
        self.killed.append(actor)


class Compiles:
    def evaluate(self, workload_id, source, options_json):
        return EvalResult(workload=workload_id, status="COMPILED").model_dump()


@pytest.fixture
def fake_ray(monkeypatch):
    import ptxbench.tools.ray_evaluator as ray_evaluator

    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(ray_evaluator, "GpuEvaluatorActor", Compiles)
    return fake


def _evaluator(**kw):
    from ptxbench.tools.ray_evaluator import RayEvaluator

    evaluator = RayEvaluator(workers=1, **kw)
    for _ in range(200):  # admitted on its own thread
        if evaluator._running:
            break
        threading.Event().wait(0.01)
    return evaluator


def test_a_ray_client_cut_off_is_an_infra_error_not_the_kernels_exception(fake_ray):
    """A Ray client (ray://) whose connection is gone raises ConnectionError from ray.get and from every .remote():
    that was raised through the loop as the evaluation's own exception, logged alike on each retry of the turn, which
    scoring reads as a crash the kernel brings on (the model's failed turn)."""
    evaluator = _evaluator(placement_wait_s=1.0)
    assert evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True)).status == "COMPILED"
    fake_ray.fail_get = fake_ray.fail_remote = ConnectionError("GRPC connection failed: Socket closed")
    lost = evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))
    assert lost.status == "INFRA_ERROR" and "ConnectionError" in lost.message + lost.runtime_error
    assert len(fake_ray.killed) == 1  # the actor it could not reach is given up, once
    again = evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))  # no actor left to ask, and none can be started
    assert again.status == "INFRA_ERROR"


def test_an_actor_whose_answer_cannot_be_read_is_infra(fake_ray):
    """An actor on a node with another ptxbench version answers with a result this one cannot read: the harness's
    fault, the same for every kernel, not an exception of this kernel's evaluation."""
    class Skewed:
        def evaluate(self, workload_id, source, options_json):
            return {"workload": 1}

    import ptxbench.tools.ray_evaluator as ray_evaluator

    ray_evaluator.GpuEvaluatorActor = Skewed  # the fixture's monkeypatch restores it
    evaluator = _evaluator()
    assert evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True)).status == "INFRA_ERROR"


def test_an_exception_raised_inside_a_live_actor_is_still_the_evaluations(fake_ray):
    import ptxbench.tools.ray_evaluator as ray_evaluator

    class Raises:
        def evaluate(self, workload_id, source, options_json):
            raise RayTaskError(ValueError("the evaluator cannot handle this kernel"))

    ray_evaluator.GpuEvaluatorActor = Raises
    evaluator = _evaluator()
    with pytest.raises(ValueError, match="cannot handle"):
        evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))
    assert fake_ray.started == 1 and fake_ray.killed == []  # the actor is kept


def test_an_evaluation_waiting_while_the_last_actor_is_replaced_waits_for_the_replacement(fake_ray):
    """The lost actor left the list before its replacement joined it (the kill between them takes a round trip): an
    evaluation waiting then saw no actor at all and came back INFRA_ERROR at once ('every one failed to start')."""
    import time

    evaluator = _evaluator(placement_wait_s=30.0)
    # every ray.get fails until the kill below: the replacements started meanwhile fail too, as many as a loaded
    # machine lets run before the test lifts the failure; this test is not about their bound
    evaluator.replacement_limit = 1000
    killed = threading.Event()

    def slow_kill(actor):
        killed.set()
        time.sleep(1.5)

    fake_ray.kill = slow_kill
    fake_ray.fail_get = RayError("the actor died")
    results = []
    first = threading.Thread(target=lambda: results.append(evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))))
    first.start()
    assert killed.wait(5)
    fake_ray.fail_get = None
    waiting = threading.Thread(target=lambda: results.append(evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))))
    waiting.start()
    first.join(10)
    waiting.join(10)
    assert sorted(r.status for r in results) == ["COMPILED", "INFRA_ERROR"]


def test_an_actor_compiles_one_evaluation_while_its_gpu_runs_another(fake_ray):
    """Each actor took one evaluation at a time, compile included: its GPU sat idle while a kernel compiled (a tools-mode
    compile or sass call never needs the GPU at all) and every other evaluation waited. Its evaluator compiles beside
    the GPU job and gives the GPU one job at a time, as the local one does."""
    import time

    import ptxbench.tools.ray_evaluator as ray_evaluator

    class Slow(Compiles):
        def evaluate(self, workload_id, source, options_json):
            time.sleep(0.6)
            return super().evaluate(workload_id, source, options_json)

    ray_evaluator.GpuEvaluatorActor = Slow
    evaluator = _evaluator()
    results = []
    runs = [threading.Thread(target=lambda: results.append(evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))))
            for _ in range(2)]
    start = time.monotonic()
    for run in runs:
        run.start()
    for run in runs:
        run.join(10)
    assert [r.status for r in results] == ["COMPILED", "COMPILED"] and time.monotonic() - start < 1.1


def test_a_lost_actor_is_replaced_once_however_many_evaluations_it_held(fake_ray):
    """Two evaluations on an actor that dies both come back INFRA_ERROR; one replacement is started, and no later
    evaluation is handed to the lost actor."""
    import time

    import ptxbench.tools.ray_evaluator as ray_evaluator

    class Dies(Compiles):
        def evaluate(self, workload_id, source, options_json):
            time.sleep(0.3)
            raise RayError("the actor died")

    ray_evaluator.GpuEvaluatorActor = Dies
    evaluator = _evaluator(placement_wait_s=5.0)
    results = []
    runs = [threading.Thread(target=lambda: results.append(evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))))
            for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(10)
    assert [r.status for r in results] == ["INFRA_ERROR", "INFRA_ERROR"]
    assert fake_ray.started == 2 and len(evaluator.actors) == 1  # the first actor, and one replacement


def test_evaluations_go_to_the_least_busy_actor(fake_ray):
    """Two evaluations with two actors idle: one each, not both to the first actor (one on its GPU, one waiting for
    it) while the other GPU sits idle."""
    import time

    import ptxbench.tools.ray_evaluator as ray_evaluator

    used = []

    class Slow(Compiles):
        def evaluate(self, workload_id, source, options_json):
            used.append(id(self))
            time.sleep(0.3)
            return super().evaluate(workload_id, source, options_json)

    ray_evaluator.GpuEvaluatorActor = Slow
    fake_ray.gpus = 2
    from ptxbench.tools.ray_evaluator import RayEvaluator

    evaluator = RayEvaluator(workers=2)
    for _ in range(200):
        if len(evaluator._running) == 2:
            break
        time.sleep(0.01)
    runs = [threading.Thread(target=lambda: evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(10)
    assert len(set(used)) == 2


def test_an_actors_result_reaches_the_driver_as_the_local_evaluator_returns_it(fake_ray, monkeypatch):
    """The result crossed as JSON, where a float that is NaN or infinite (a profile counter, a measured ceiling) is
    written null, which a field that must be a number then refused: the kernel's verdict became the Ray worker's
    failure (INFRA_ERROR, its actor replaced, the turn retried and left out of the scores)."""
    import math

    import ptxbench.tools.ray_evaluator as ray_evaluator
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.results import Timing, TimingStat

    stat = TimingStat(median_ms=1.0, ci_low_ms=0.9, ci_high_ms=1.1, n=10)
    verdict = EvalResult(workload=WL, status="INCORRECT_NUMERICAL",
                         timing=Timing(candidate=stat, ceilings={"hbm_gbps": float("nan")}))
    monkeypatch.setattr(LocalEvaluator, "evaluate", lambda self, workload, source, options: verdict)
    monkeypatch.setattr(ray_evaluator, "GpuEvaluatorActor", REAL_ACTOR)
    evaluator = _evaluator()
    result = evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))
    assert result.status == "INCORRECT_NUMERICAL" and math.isnan(result.timing.ceilings["hbm_gbps"])


def _cluster(fake, nodes: list[str], then: str = "spare"):
    """An evaluator with one actor per entry of `nodes` (placed there, in order); later actors go to node `then`."""
    import time

    from ptxbench.tools.ray_evaluator import RayEvaluator

    fake.gpus = len(nodes)
    fake.place = lambda n: nodes[n] if n < len(nodes) else then
    evaluator = RayEvaluator(workers=len(nodes), placement_wait_s=5.0)
    for _ in range(200):
        if len(evaluator._running) == len(nodes):
            break
        time.sleep(0.01)
    return evaluator


def test_a_node_lost_under_a_busy_actor_costs_no_evaluation_an_infra_error(fake_ray):
    """A node with two actors dies while one runs an evaluation and the other is idle. The evaluation in flight came
    back INFRA_ERROR, and so did the next one handed to the idle actor, each a retry of its trajectory (enough of them
    infra-failed it). Now the one in flight is evaluated on the other node, the idle actor is checked before it takes
    any, and each lost actor is given up (and replaced) once."""
    import ptxbench.tools.ray_evaluator as ray_evaluator

    holding, release = threading.Event(), threading.Event()

    class Held(Compiles):
        def evaluate(self, workload_id, source, options_json):
            if source == "held":
                holding.set()
                release.wait(10)
            return super().evaluate(workload_id, source, options_json)

    ray_evaluator.GpuEvaluatorActor = Held
    evaluator = _cluster(fake_ray, ["a", "a", "b", "b"])
    results = []
    busy = threading.Thread(target=lambda: results.append(evaluator.evaluate(WL, "held", EvalOptions(no_gpu=True))))
    busy.start()
    assert holding.wait(5)
    (node,) = {a.node for a in evaluator._running if evaluator._running[a]}  # where the evaluation runs
    lost = [a for a in evaluator.actors if a.node == node]
    fake_ray.dead_nodes.add(node)
    release.set()
    busy.join(10)
    later = [evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True)) for _ in range(6)]
    assert [r.status for r in results + later] == ["COMPILED"] * 7
    for _ in range(200):  # the idle actor's check runs on a thread of its own
        if len(fake_ray.killed) == 2:
            break
        threading.Event().wait(0.01)
    assert sorted(map(id, fake_ray.killed)) == sorted(map(id, lost))  # the node's two actors, each given up once
    assert fake_ray.started == 6 and len(evaluator.actors) == 4  # and each replaced once
    assert not {a.node for a in evaluator.actors} & fake_ray.dead_nodes


def test_a_node_lost_mid_bench_costs_no_trajectory_a_retry(fake_ray, tmp_path):
    """The bench over that cluster: a node dies under the first evaluation while its other actor is idle. With no
    infra retry allowed every trajectory still ends whole, on its first attempt."""
    from bench_fixtures import CountingModel
    from ptxbench.agent.bench.matrix import BenchConfig
    from ptxbench.agent.bench.runner import run_bench
    import ptxbench.tools.ray_evaluator as ray_evaluator

    first = threading.Lock()

    class NodeDies(Compiles):
        def evaluate(self, workload_id, source, options_json):
            if first.acquire(blocking=False):  # the first evaluation's node goes while it runs; no other node does
                fake_ray.dead_nodes.add(self.node)
            return super().evaluate(workload_id, source, options_json)

    ray_evaluator.GpuEvaluatorActor = NodeDies
    evaluator = _cluster(fake_ray, ["a", "a", "b", "b"])
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=4, turns=2, no_gpu=True, parallel=4,
                      infra_retries=0)
    out = run_bench(cfg, tmp_path / "run", evaluator=evaluator, model_factory=lambda c: CountingModel([]))
    assert [(r.attempts, r.infra_failed, r.statuses) for r in out.trajectories] == [(1, False, ["COMPILED"] * 2)] * 4
    assert len(fake_ray.killed) == 2 and len(set(map(id, fake_ray.killed))) == 2


def test_nodes_that_keep_dying_stop_the_bench_in_one_line_and_resume_goes_on(fake_ray, tmp_path):
    """Every node dies, and every node a replacement is placed on too: the actors lost are replaced a bounded number of
    times (not started and lost for ever), then the bench stops in one line naming --resume, and the resume, on a
    cluster that works again, finishes every trajectory without spending a retry on the lost cluster."""
    from bench_fixtures import CountingModel
    from ptxbench.agent.bench.evaluators import NoWorkerLeft
    from ptxbench.agent.bench.matrix import BenchConfig
    from ptxbench.agent.bench.runner import run_bench
    from ptxbench.agent.records.rundir import load_run
    from ptxbench.agent.scoring import score_runs
    from ptxbench.tools.ray_evaluator import REPLACEMENTS_PER_WORKER

    evaluator = _cluster(fake_ray, ["a", "b"], then="doomed")
    fake_ray.dead_nodes.update({"a", "b", "doomed"})
    cfg = BenchConfig(models=["scripted/py"], workloads=[WL], trajectories=3, turns=2, no_gpu=True, parallel=1,
                      infra_retries=2)
    calls: list[int] = []
    with pytest.raises(NoWorkerLeft) as stopped:
        run_bench(cfg, tmp_path / "run", evaluator=evaluator, model_factory=lambda c: CountingModel(calls))
    line = str(stopped.value)
    assert "\n" not in line and "no Ray GPU worker is running" in line
    assert f"ptxbench bench --resume --run-dir {tmp_path / 'run'}" in line
    assert fake_ray.started == 2 + 2 * REPLACEMENTS_PER_WORKER and evaluator.actors == []
    for _ in range(200):  # the last one lost leaves the list before it is killed
        if len(fake_ray.killed) == fake_ray.started:
            break
        threading.Event().wait(0.01)
    assert len(set(map(id, fake_ray.killed))) == len(fake_ray.killed) == fake_ray.started
    assert calls == [1] and len(load_run(tmp_path / "run")) == 1  # one model call; no trajectory started after it

    fake_ray.dead_nodes.clear()
    again = _cluster(fake_ray, ["c", "d"])
    out = run_bench(None, tmp_path / "run", resume=True, evaluator=again, model_factory=lambda c: CountingModel(calls))
    assert [(r.attempts, r.infra_failed) for r in out.trajectories] == [(1, False)] * 3
    assert sorted(calls) == [1, 1, 1, 2, 2, 2]  # the first model call is not made again
    score = score_runs([tmp_path / "run"])
    assert score.n_infra_failed == 0 and [len(t.scored_turns) for t in score.trajectories] == [2, 2, 2]


def _lose_the_actor(fake, evaluator):
    """The node of the slot's actor dies (preempted): its next evaluation finds it lost."""
    fake.dead_nodes.update(actor.node for actor in evaluator.actors)


def test_a_slot_replaced_more_times_than_the_limit_lives_on_while_each_replacement_evaluates(fake_ray):
    """A week on spot nodes: the slot's actor is preempted twenty times, and each replacement then completes an
    evaluation. The limit counted every replacement over the bench, so the ninth loss gave the slot up for good (the
    bench stopped with no worker) although every replacement had worked."""
    from ptxbench.tools.ray_evaluator import REPLACEMENTS_PER_WORKER

    evaluator = _cluster(fake_ray, ["node0"])
    fake_ray.place = lambda n: f"node{n}"  # each replacement on a node of its own
    losses = 20
    assert losses > REPLACEMENTS_PER_WORKER + 1
    statuses = []
    for _ in range(losses):
        _lose_the_actor(fake_ray, evaluator)
        statuses.append(evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True)).status)  # sent on to the replacement
    assert statuses == ["COMPILED"] * losses and not evaluator.no_worker
    assert fake_ray.started == 1 + losses and len(evaluator.actors) == 1


def test_a_slot_whose_replacements_keep_dying_before_evaluating_is_given_up_after_the_limit(fake_ray):
    """The slot worked for a while (losses each followed by a completed evaluation), then its node and every node a
    replacement lands on dies before the replacement finishes anything: nine losses in a row give the slot up after
    REPLACEMENTS_PER_WORKER replacements, as before, never a loop of actors started and lost."""
    from ptxbench.tools.ray_evaluator import REPLACEMENTS_PER_WORKER

    evaluator = _cluster(fake_ray, ["node0"])
    fake_ray.place = lambda n: f"node{n}"
    for _ in range(3):
        _lose_the_actor(fake_ray, evaluator)
        assert evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True)).status == "COMPILED"
    started = fake_ray.started
    fake_ray.place = lambda n: "doomed"
    fake_ray.dead_nodes.add("doomed")
    _lose_the_actor(fake_ray, evaluator)
    result = evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))
    assert result.status == "INFRA_ERROR" and evaluator.no_worker
    assert f"last {REPLACEMENTS_PER_WORKER} replacements lost" in evaluator.no_worker
    assert fake_ray.started == started + REPLACEMENTS_PER_WORKER and evaluator.actors == []  # 1 + 8 lost: 9 losses


def test_an_evaluation_whose_actor_is_lost_under_it_again_and_again_is_the_trajectorys_retry(fake_ray):
    """Replacements come, and each dies under the same evaluation: after SENDS_PER_EVALUATION it comes back
    INFRA_ERROR (the trajectory's own bounded retry), not sent from actor to actor for as long as there are GPUs."""
    import ptxbench.tools.ray_evaluator as ray_evaluator
    from ptxbench.tools.ray_evaluator import SENDS_PER_EVALUATION

    class TakesItsNode(Compiles):
        def evaluate(self, workload_id, source, options_json):
            fake_ray.dead_nodes.add(self.node)
            return super().evaluate(workload_id, source, options_json)

    ray_evaluator.GpuEvaluatorActor = TakesItsNode
    evaluator = _cluster(fake_ray, ["a", "b"])
    fake_ray.place = lambda n: f"node{n}"  # each replacement on a node of its own
    result = evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))
    assert result.status == "INFRA_ERROR" and "ActorDiedError" in result.message
    assert len(fake_ray.killed) == SENDS_PER_EVALUATION and evaluator.actors  # others still there for the retry


def test_evaluations_waiting_for_a_placement_give_up_together_and_say_no_worker(fake_ray):
    """The only node is lost and its replacement waits for a GPU that never comes: the evaluations waiting for it gave
    up each placement_wait_s after it began, the bench stopping only once the last did. They give up together, and
    the evaluator says that it has no worker (`no_worker`), which stops the bench."""
    import time

    up = fake_ray_pending.setdefault("pending", threading.Event())
    try:
        evaluator = _cluster(fake_ray, ["a"], then="pending")
        evaluator.placement_wait_s = 3.0
        fake_ray.dead_nodes.add("a")
        results, start = [], time.monotonic()

        def run():
            results.append((evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True)), time.monotonic() - start))

        first = threading.Thread(target=run)
        first.start()
        time.sleep(1.5)
        second = threading.Thread(target=run)
        second.start()
        first.join(10)
        second.join(10)
        assert [r.status for r, _ in results] == ["INFRA_ERROR"] * 2 and max(t for _, t in results) < 4.0
        assert evaluator.no_worker.startswith("no Ray GPU worker is running (1 waiting to be placed")
        up.set()  # the replacement is placed at last: it takes evaluations, and the evaluator has a worker again
        for _ in range(200):
            if evaluator._running:
                break
            time.sleep(0.01)
        assert evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True)).status == "COMPILED" and not evaluator.no_worker
    finally:
        up.set()
        fake_ray_pending.clear()


def test_the_cli_says_in_one_line_that_no_worker_is_left_and_how_to_resume(fake_ray, tmp_path):
    """`ptxbench bench --backend ray` on a cluster whose every node is dead (and every node a replacement lands on):
    one line naming --resume, no traceback, the run recorded for the resume."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    fake_ray.dead_nodes.add("node0")
    run = tmp_path / "b"
    out = CliRunner().invoke(app, ["bench", "--models", "builtin/tuner", "--workloads", WL, "--trajectories", "2",
                                   "--turns", "1", "--no-gpu", "--backend", "ray", "--run-dir", str(run), "--no-report"])
    assert out.exit_code == 1 and "Traceback" not in out.output, out.output  # a failed run (2 is a usage error)
    (line,) = [l for l in out.output.splitlines() if "no Ray GPU worker is running" in l]
    assert f"ptxbench bench --resume --run-dir {run}" in line
    assert (run / "manifest.json").exists()


def test_an_actor_whose_gpu_takes_no_worker_leaves_and_its_evaluation_runs_elsewhere(fake_ray, monkeypatch):
    """An actor whose LocalEvaluator found its GPU lost for good (no worker starts on it: its pool's no_worker) answered
    INFRA_ERROR to every evaluation at once, so it took most of them and spent the trajectories' retries. It leaves
    (ray.actor.exit_actor); the driver gives it up as lost and sends the evaluation, which never ran, to its
    replacement."""
    import ptxbench.tools.ray_evaluator as ray_evaluator
    from ptxbench.tools.evaluate import LocalEvaluator

    broken: set = set()

    def evaluate(self, workload, source, options):
        if not broken:  # the first actor's GPU is lost; its replacement's is fine
            broken.add(id(self))
        if id(self) in broken:
            return EvalResult(workload=workload, status="INFRA_ERROR", message="no worker could start on GPU 0")
        if source == "referee lost":
            return EvalResult(workload=workload, status="INFRA_ERROR", message="the referee was lost")
        return EvalResult(workload=workload, status="COMPILED")

    monkeypatch.setattr(LocalEvaluator, "evaluate", evaluate)
    monkeypatch.setattr(LocalEvaluator, "no_worker", property(lambda self: "GPU 0 lost" if id(self) in broken else ""))
    monkeypatch.setattr(ray_evaluator, "GpuEvaluatorActor", REAL_ACTOR)
    evaluator = _evaluator(placement_wait_s=10.0)
    result = evaluator.evaluate(WL, "k", EvalOptions(no_gpu=True))
    assert result.status == "COMPILED", result.message
    assert fake_ray.exited == 1 and fake_ray.started == 2
    # an INFRA_ERROR of a GPU that still takes workers (a lost referee, say) keeps its actor
    again = evaluator.evaluate(WL, "referee lost", EvalOptions(no_gpu=True))
    assert again.status == "INFRA_ERROR" and fake_ray.exited == 1 and fake_ray.started == 2
