"""GPU evaluation on a Ray cluster: one actor per GPU (num_gpus=1), each holding a LocalEvaluator.

The driver keeps the model calls and the trajectories; RayEvaluator.evaluate (the Evaluator protocol
of tools/evaluator.py) hands a solution to a free actor and blocks its trajectory's thread until the
result comes back. An actor takes EVALUATIONS_PER_ACTOR at once, so one compiles while another runs on its GPU; its
pool gives the GPU one candidate at a time. An actor takes evaluations only once Ray has
placed and started it: one waiting for a GPU (a node lost, the cluster's GPUs or CPUs held by other jobs) holds
none back. A lost actor (its node gone, its process dead: Ray's LOSS_ERRORS) is given up once and replaced, the actors
on its node are checked before they take more work, and its evaluations go to the other actors: the infrastructure's
loss costs the trajectory no retry. A Ray client cut off from its cluster or an answer that cannot be read comes back
as INFRA_ERROR (the actor replaced); the bench retries the step. With no actor running, an evaluation waits
`placement_wait_s` for one, then comes back INFRA_ERROR with `no_worker` set, which stops the bench (at once when no
actor is left: every one lost with its replacements spent, or failed in its start, e.g. ptxbench missing on the node).
An actor slot's replacements are counted from its last completed evaluation: a week on preemptible nodes may replace
it any number of times, while replacements that keep dying before they finish one give the slot up.
An exception raised by the evaluation inside a live actor is raised here, as the local evaluator would raise it.
Every node needs ptxbench installed (`pip install ptxbench[gpu]`), as Ray ships no code here.

    ray start --head --num-gpus=1            # or an existing cluster
    ptxbench bench --backend ray --ray-address auto ...
"""
from __future__ import annotations

import os
import socket
import threading
import time

from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.results import EvalResult


class GpuEvaluatorActor:
    """Runs inside a Ray actor with one GPU: Ray sets CUDA_VISIBLE_DEVICES, so the pool sees device 0 only."""

    def __init__(self) -> None:
        from ptxbench.tools.evaluate import LocalEvaluator
        from ptxbench.tools.gpu.pool import PoolConfig

        self.evaluator = LocalEvaluator(pool_config=PoolConfig(devices=[0]))

    def evaluate(self, workload_id: str, source: str, options_json: str) -> dict:
        options = EvalOptions.model_validate_json(options_json)
        result = self.evaluator.evaluate(workload_id, source, options)
        if result.status == "INFRA_ERROR" and self.evaluator.no_worker:
            # this actor's GPU takes no worker any more (fallen off the bus): an actor that answered INFRA_ERROR to
            # every evaluation would take most of them, as it is free at once; it leaves, and the driver gives it up
            # as lost and sends the evaluation (none of which ran) to another actor, its replacement placed anew
            import ray

            ray.actor.exit_actor()
        # plain Python values, as pickled by Ray: JSON would write a NaN or infinite float (a counter, a ceiling) as
        # null, which the driver's EvalResult then refused as a number
        return result.model_dump()

    def where(self) -> dict:
        import ray

        return {"host": socket.gethostname(), "pid": os.getpid(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "node_id": ray.get_runtime_context().get_node_id()}

    def close(self) -> None:
        self.evaluator.close()


PLACEMENT_WAIT_S = 600.0  # no actor running this long: an evaluation comes back INFRA_ERROR
# Evaluations an actor takes at once: its LocalEvaluator compiles one (CPU work; a tools-mode compile or sass call never
# needs the GPU) while its pool runs another on the GPU, one job at a time, as the local evaluator does
EVALUATIONS_PER_ACTOR = 2
# Ray's exceptions for an actor that is gone (its process, or its node: ActorDiedError and ActorUnavailableError are
# RayActorErrors) or a result lost with its node: the evaluation is sent to another actor. Looked up by name, as an
# older Ray lacks some of them.
LOSS_ERRORS = ("RayActorError", "NodeDiedError", "WorkerCrashedError", "ObjectLostError")
# Sends of one evaluation whose actor is lost under it each time: then INFRA_ERROR, the trajectory's own (bounded)
# retry. Two node losses in a row are still the cluster's; a kernel that somehow takes its node down does not take
# every node with it.
SENDS_PER_EVALUATION = 3
# Lost actors replaced in a row per actor slot, none of them finishing an evaluation: nodes that keep dying (a preemptible
# pool drained, a cluster torn down, a node whose actors crash) end the bench once every slot is given up, never a loop
# of actors started and lost. The count starts again at the slot's next completed evaluation, not over a time window:
# spot preemptions come at the cloud's pace, in bursts, and a replacement that then evaluates for hours has shown the
# slot works, which no window length tuned to one pool's preemption rate would tell.
REPLACEMENTS_PER_WORKER = 8


class RayEvaluator:
    """The Evaluator protocol over a set of Ray GPU actors (blocking; safe to call from many threads)."""

    def __init__(self, address: str | None = None, workers: int | None = None, fake_gpus: bool = False,
                 init_kwargs: dict | None = None, placement_wait_s: float = PLACEMENT_WAIT_S):
        import ray

        if not ray.is_initialized():
            kwargs = dict(init_kwargs or {})
            if address:
                kwargs["address"] = address
            elif fake_gpus:  # --no-gpu on a machine without GPUs: declare them so GPU actors can be placed
                kwargs.setdefault("num_gpus", workers or 1)
            kwargs.setdefault("include_dashboard", False)
            kwargs.setdefault("log_to_driver", False)
            ray.init(**kwargs)
        self._ray = ray
        gpus = int(ray.cluster_resources().get("GPU", 0))
        self.workers = workers or gpus
        if self.workers < 1 or gpus < self.workers:
            raise RuntimeError(f"the Ray cluster has {gpus} GPU(s); {self.workers or 1} needed for the evaluator actors")
        self.placement_wait_s = placement_wait_s
        self._actor_class = ray.remote(num_gpus=1, max_restarts=0, max_concurrency=EVALUATIONS_PER_ACTOR)(GpuEvaluatorActor)
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)  # notified when an actor starts or an evaluation ends
        self._running: dict = {}  # actors placed and started -> their evaluations in flight; the rest of self.actors wait
        self._dropped: set = set()  # actors lost
        self._node: dict = {}  # running actors -> their node (Ray's node id)
        self._checking: set = set()  # running actors whose node lost an actor: no new evaluation until they answer
        self._gave_up_at = float("-inf")  # when an evaluation last found no actor running: those waiting with it give up
        self._closed = False
        self._lost_errors = tuple(c for c in (getattr(ray.exceptions, n, None) for n in LOSS_ERRORS) if isinstance(c, type))
        self.replacement_limit = REPLACEMENTS_PER_WORKER  # per slot, in a row without a completed evaluation
        self._slot: dict = {}  # actors -> their slot (0 .. workers-1); a replacement takes the lost actor's
        self._replaced = [0] * self.workers  # per slot: replacements since its last completed evaluation
        self.start_error = ""  # the last actor start that failed in the actor's own code
        self.no_worker = ""  # why the last evaluation found no actor to run on ('' once one runs): the bench stops
        self.actors: list = []
        for slot in range(self.workers):
            self._start(slot)

    def _start(self, slot: int, instead_of=None) -> None:
        """A new actor in `slot`, admitted once placed; `instead_of` leaves the list as it joins, so an evaluation
        waiting meanwhile never sees none at all (and gives up at once, as when every start failed)."""
        actor = self._actor_class.remote()
        with self._lock:
            self.actors = [a for a in self.actors if a is not instead_of] + [actor]
            self._slot[actor] = slot
        threading.Thread(target=self._admit, args=(actor,), daemon=True, name="ray-evaluator-start").start()

    def _admit(self, actor) -> None:
        """The actor joins the free ones once Ray has placed and started it (however long that takes)."""
        try:
            where = self._ray.get(actor.where.remote())
        except Exception as exc:  # noqa: BLE001 - it died before it ran: its node lost, or its own start failed
            init_failed = getattr(exc, "actor_init_failed", False)
            if init_failed:
                self.start_error = str(exc)[:2000]
            self._drop(actor, replace=not init_failed)  # a start that fails in its code would fail again
            return
        with self._lock:
            if self._closed or not any(a is actor for a in self.actors):
                return
            self._running[actor] = 0
            self._node[actor] = (where or {}).get("node_id") or (where or {}).get("host")
            self.no_worker = ""
            self._freed.notify_all()

    def _drop(self, actor, replace: bool) -> None:
        with self._lock:
            if actor in self._dropped:  # another of its evaluations found it lost first: replaced once
                return
            self._dropped.add(actor)
            self._running.pop(actor, None)
            self._node.pop(actor, None)
            self._checking.discard(actor)
            slot = self._slot.pop(actor, None)
            replace = (replace and not self._closed and slot is not None
                       and self._replaced[slot] < self.replacement_limit)
            if replace:
                self._replaced[slot] += 1
        if replace:
            try:
                self._start(slot, instead_of=actor)
            except Exception as exc:  # noqa: BLE001 - the cluster cannot be asked (a Ray client cut off): none to wait for
                self.start_error = f"{type(exc).__name__}: {exc}"[:2000]
        with self._lock:
            self.actors = [a for a in self.actors if a is not actor]
        try:
            self._ray.kill(actor)
        except Exception:  # noqa: BLE001 - it may be gone already
            pass

    def _lose(self, actor) -> None:
        """`actor` is gone: given up (once, replaced), and the others on its node checked before they take another
        evaluation: a node that died took them all, and each idle one would fail the next evaluation sent to it."""
        with self._lock:
            node = self._node.get(actor)
            mates = [a for a in self._running if a is not actor and node is not None and self._node.get(a) == node
                     and a not in self._checking]
            self._checking.update(mates)
        self._drop(actor, replace=True)
        for mate in mates:
            threading.Thread(target=self._check, args=(mate,), daemon=True, name="ray-evaluator-check").start()

    def _check(self, actor) -> None:
        """Back to work once it answers (after the evaluations it runs), or given up as lost."""
        try:
            self._ray.get(actor.where.remote())
        except Exception:  # noqa: BLE001 - gone with its node, or unreachable: lost
            self._drop(actor, replace=True)
        with self._freed:
            self._checking.discard(actor)
            self._freed.notify_all()

    def where(self) -> list[dict]:
        """Where each actor runs (waits for those not started yet)."""
        with self._lock:
            actors = list(self.actors)
        return self._ray.get([a.where.remote() for a in actors])

    def _take(self):
        """The running actor with the fewest evaluations in flight (below EVALUATIONS_PER_ACTOR: a second GPU is not left
        idle while one holds two), or None once none has run for placement_wait_s (at once when none is left to start,
        or when another evaluation waiting meanwhile gave up)."""
        began = time.monotonic()
        deadline = began + self.placement_wait_s
        with self._freed:
            while True:
                free = [a for a, n in self._running.items() if n < EVALUATIONS_PER_ACTOR and a not in self._checking]
                if free:
                    actor = min(free, key=self._running.__getitem__)
                    self._running[actor] += 1
                    return actor
                running, waiting = len(self._running), len(self.actors) - len(self._running)
                if not running and (not waiting or time.monotonic() > deadline or self._gave_up_at > began):
                    self._gave_up_at = time.monotonic()
                    return None
                if running:  # the actors are busy: evaluations queue as long as they must
                    deadline = time.monotonic() + self.placement_wait_s
                self._freed.wait(0.5)

    def _give_back(self, actor, completed: bool) -> None:
        with self._freed:
            if completed and actor in self._slot:  # the slot works: its replacements are counted afresh
                self._replaced[self._slot[actor]] = 0
            if actor in self._running:
                self._running[actor] -= 1
                self._freed.notify()

    def evaluate(self, workload_id: str, source: str, options: EvalOptions | None = None) -> EvalResult:
        options = options or EvalOptions()
        for _ in range(SENDS_PER_EVALUATION):
            try:
                return self._send(workload_id, source, options)
            except self._lost_errors as exc:  # the actor is gone (given up): another one evaluates it
                lost = exc
        return EvalResult(workload=workload_id, status="INFRA_ERROR",
                          message=f"the Ray GPU worker was lost ({type(lost).__name__}) {SENDS_PER_EVALUATION} times "
                                  "under this evaluation; the evaluation is retried",
                          runtime_error=f"{type(lost).__name__}: {lost}"[:2000])

    def _no_worker(self, workload_id: str) -> EvalResult:
        with self._lock:
            waiting = len(self.actors)
        cause = (f"{waiting} waiting to be placed for {self.placement_wait_s:.0f} s (no free GPU in the cluster?)"
                 if waiting else "every one lost or failed to start" + (f": {self.start_error}" if self.start_error else
                                                                         f", each slot's last {self.replacement_limit} "
                                                                         "replacements lost before finishing an evaluation"))
        self.no_worker = f"no Ray GPU worker is running ({cause})"[:2000]
        return EvalResult(workload=workload_id, status="INFRA_ERROR", message=self.no_worker)

    def _send(self, workload_id: str, source: str, options: EvalOptions) -> EvalResult:
        """One evaluation on a free actor; a LOSS_ERRORS exception (the actor given up) when it is lost."""
        actor = self._take()
        if actor is None:
            return self._no_worker(workload_id)
        lost = gone = completed = False
        try:
            ref = actor.evaluate.remote(workload_id, source, options.model_dump_json())
            result = EvalResult.model_validate(self._ray.get(ref))
            completed = True
            return result
        except self._ray.exceptions.RayTaskError as exc:
            # the evaluation raised in a live actor (a harness bug some text triggers): the local evaluator's exception,
            # so the loop records it with its traceback and retries, and a repeat on the same kernel is scored as the
            # model's (scoring/turns.py 'reproduced'); the actor is kept, not restarted once per such kernel
            raise (exc.cause if isinstance(exc.cause, Exception) else RuntimeError(str(exc))) from exc
        except self._lost_errors:  # checked after RayTaskError, whose instances Ray also makes of the cause's class
            gone = True
            raise
        except Exception as exc:  # noqa: BLE001 - Ray's other failures (a Ray client cut off: ConnectionError; an
            # answer this version cannot read; another RayError): the infrastructure's, never the kernel's, which a
            # retry that raised alike again would have made (scoring/turns.py 'reproduced')
            lost = True
            return EvalResult(workload=workload_id, status="INFRA_ERROR",
                              message=f"the Ray GPU worker failed ({type(exc).__name__}); the evaluation is retried",
                              runtime_error=f"{type(exc).__name__}: {exc}"[:2000])
        finally:
            if gone:
                self._lose(actor)
            elif lost:  # its replacement takes evaluations once placed (never a pending actor)
                self._drop(actor, replace=True)
            else:
                self._give_back(actor, completed)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            actors, running = list(self.actors), set(self._running)
            self._freed.notify_all()
        refs = [a.close.remote() for a in actors if a in running]
        try:
            self._ray.get(refs, timeout=60)
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        for actor in actors:
            try:
                self._ray.kill(actor)
            except Exception:  # noqa: BLE001 - it may be gone already
                pass
        self.actors = []
