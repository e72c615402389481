"""A Ray node lost under the bench, on a real (single-machine) Ray cluster of several nodes with fake GPUs: Ray's own
exceptions for a node's actors, busy and idle, reach RayEvaluator as they would on a real cluster."""
from __future__ import annotations

import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="the 'bench' extra (ray) is not installed")

from ptxbench.tools.evaluator import EvalOptions  # noqa: E402
from bench_fixtures import NOOP, WL  # noqa: E402


@pytest.fixture
def cluster():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():  # another test module's instance
        ray.shutdown()
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    nodes = [made.add_node(num_cpus=2, num_gpus=2) for _ in range(2)]
    ray.init(address=made.address, include_dashboard=False, log_to_driver=False)
    yield made, nodes
    ray.shutdown()
    made.shutdown()


def test_a_node_lost_with_a_busy_and_an_idle_actor_costs_no_evaluation(cluster, monkeypatch):
    """Two nodes of two GPU actors; the node of the actor running an evaluation dies (its other actor idle). The
    evaluation in flight and those after it are evaluated on the other node's actors: no INFRA_ERROR; both lost
    actors are given up, and their replacements join once a node with GPUs is back."""
    import ptxbench.tools.ray_evaluator as ray_evaluator
    from ptxbench.tools.ray_evaluator import RayEvaluator

    made, nodes = cluster

    class Slow(ray_evaluator.GpuEvaluatorActor):
        def evaluate(self, workload_id, source, options_json):
            if "slow" in source:
                time.sleep(3)
            return super().evaluate(workload_id, source, options_json)

    monkeypatch.setattr(ray_evaluator, "GpuEvaluatorActor", Slow)
    evaluator = RayEvaluator(workers=4, placement_wait_s=60)
    try:
        evaluator.where()
        for _ in range(500):  # each admitted on its own thread
            if len(evaluator._running) == 4:
                break
            time.sleep(0.02)
        options = EvalOptions(no_gpu=True)
        results = []
        busy = threading.Thread(target=lambda: results.append(evaluator.evaluate(WL, NOOP + "// slow\n", options)))
        busy.start()
        for _ in range(500):
            if any(evaluator._running.values()):
                break
            time.sleep(0.01)
        (actor,) = [a for a, n in evaluator._running.items() if n]
        node_id = evaluator._node[actor]
        (doomed,) = [n for n in nodes if n.node_id == node_id]
        lost = [a for a, n in evaluator._node.items() if n == node_id]
        assert len(lost) == 2
        made.remove_node(doomed)
        busy.join(60)
        later = [evaluator.evaluate(WL, NOOP, options) for _ in range(4)]
        assert [r.status for r in results + later] == ["COMPILED"] * 5, [r.message for r in results + later]
        for _ in range(500):  # the idle actor's check runs on a thread of its own
            if not any(a in evaluator.actors for a in lost):
                break
            time.sleep(0.02)
        assert not any(a in evaluator.actors for a in lost) and len(evaluator.actors) == 4
        made.add_node(num_cpus=2, num_gpus=2)  # the replacements' GPUs
        assert len(evaluator.where()) == 4
    finally:
        evaluator.close()
