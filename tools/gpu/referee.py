"""The referee: a second process on the worker's GPU that holds the expected outputs and judges the candidate's.

The candidate runs in the worker's process, so anything in that process's GPU address space is within its
reach (a far read finds the expected output, a far write replaces it). The referee keeps what the verdict
is computed from in its own CUDA context, which no kernel of the worker can address: it draws the same
seeded inputs, computes the float32 references (and, when needed, the library's own error), and judges the
candidate's buffers after the candidate's work is done. It sees them through CUDA IPC: the referee maps the
worker's buffers, never the other way round.

Protocol over a Pipe (torch's pickler: CUDA tensors travel as IPC handles); one reply per request, in order:
  {"op": "prepare", "workload", "seed", "dist"}                          -> {"ok": True, "digest": [...], "key"}
  {"op": "judge", "workload", "seed", "dist", "trial", "outputs", "inputs"} -> {"ok": True, "stats": [TrialStats dicts]}
  {"op": "inputs", "workload", "seed", "dist", "inputs"}                    -> {"ok": True, "changed": [names]}
  {"op": "forget"}                                                          -> {"ok": True}
  {"op": "exit"}
An exception in the referee is a harness fault: {"ok": False, "error": traceback} -> INFRA_ERROR.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass

import torch

from ...workloads.baselines import make_baseline
from ...workloads.inputs import judging_weights, make_inputs
from ...workloads.references import run_reference
from ...workloads.registry import get_workload
from .correctness import library_error, output_digest
from .verdict import judge_outputs

WARM_UP_WORKLOADS = ("smoke_gemm_bf16_m256_n256_k512", "smoke_mha_fwd_d64")  # what RefereeCore.warm_up runs
# prepared (workload, seed, dist) triples kept; an evaluation needs trials + 1 + its other declared distributions
KEEP_DATA_SETS = 8


class RefereeError(RuntimeError):
    """The referee failed or vanished: a harness fault (INFRA_ERROR), never the candidate's."""


@dataclass
class TrialData:
    inputs: dict[str, torch.Tensor]
    reference: dict[str, torch.Tensor]


def input_digest(inputs: dict[str, torch.Tensor]) -> list:
    """Bit fingerprint of a set of inputs: the worker and the referee must have drawn the same tensors."""
    return [[name, *output_digest(t)] for name, t in sorted(inputs.items())]


class RefereeCore:
    """The referee's state and judgments; runs in the referee process (or in-process in CPU tests)."""

    def __init__(self, device: str = "cuda"):
        self.device = device
        self.data: dict[tuple, TrialData] = {}
        self.library: dict[tuple, dict] = {}

    def prepare(self, workload: str, seed: int, dist: str) -> list:
        key = (workload, seed, dist)
        if key not in self.data:
            wl = get_workload(workload)
            inputs = make_inputs(wl, seed, dist, self.device)
            reference = {k: v.float().contiguous() for k, v in run_reference(wl, inputs).items()}
            while len(self.data) >= KEEP_DATA_SETS:
                old = next(iter(self.data))
                self.data.pop(old)
                self.library.pop(old, None)
            self.data[key] = TrialData(inputs, reference)
        return input_digest(self.data[key].inputs)

    def _library_errors(self, key: tuple) -> dict:
        if key not in self.library:
            wl = get_workload(key[0])
            data = self.data[key]
            primary = wl.primary_baseline.name
            outputs = make_baseline(wl, primary, data.inputs)()
            if self.device == "cuda":
                torch.cuda.synchronize()
            weights = judging_weights(wl, data.inputs)  # the units the candidate's outputs are judged in
            self.library[key] = {n: library_error(outputs[n], ref, wl.tolerance.for_tensor(n), primary, weights.get(n))
                                 for n, ref in data.reference.items()}
        return self.library[key]

    def judge(self, workload: str, seed: int, dist: str, trial: int, outputs: dict, inputs: dict) -> list[dict]:
        key = (workload, seed, dist)
        self.prepare(workload, seed, dist)
        stats = judge_outputs(outputs, inputs, self.data[key], get_workload(workload), trial, dist,
                              lambda: self._library_errors(key))
        return [s.model_dump() for s in stats]

    def changed_inputs(self, workload: str, seed: int, dist: str, inputs: dict) -> list[str]:
        self.prepare(workload, seed, dist)
        truth = self.data[(workload, seed, dist)].inputs
        return [n for n, x in truth.items() if not torch.equal(inputs[n], x)]

    def warm_up(self) -> float:
        """Run each kind of work a first judgment does (inputs, reference, comparison; the GEMM and the attention
        forward) on smoke shapes, then forget it: the first evaluation on this GPU measured about 3 s more in its
        correctness phase than every later one (bench/results/eval_throughput.md), and this runs while the worker
        starts instead. Returns the seconds it took; never raises (a referee that cannot warm up still serves)."""
        start = time.perf_counter()
        for workload in WARM_UP_WORKLOADS:
            try:
                wl = get_workload(workload)
                self.prepare(workload, 0, "normal")
                data = self.data[(workload, 0, "normal")]
                dtypes = {t.name: getattr(torch, t.dtype) for t in wl.tensors}
                outputs = {n: r.to(dtypes[n]) for n, r in data.reference.items()}  # as a kernel would write them
                judge_outputs(outputs, data.inputs, data, wl, 0, "normal")
            except Exception:  # noqa: BLE001 - a warm-up is an optimisation, never a failure
                continue
        self.forget()
        return time.perf_counter() - start

    def forget(self) -> None:
        self.data.clear()
        self.library.clear()
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def handle(self, msg: dict) -> dict:
        op = msg["op"]
        if op == "prepare":
            return {"ok": True, "digest": self.prepare(msg["workload"], msg["seed"], msg["dist"]),
                    "key": (msg["workload"], msg["seed"], msg["dist"])}
        if op == "judge":
            return {"ok": True, "stats": self.judge(msg["workload"], msg["seed"], msg["dist"], msg["trial"],
                                                    msg["outputs"], msg["inputs"])}
        if op == "inputs":
            return {"ok": True, "changed": self.changed_inputs(msg["workload"], msg["seed"], msg["dist"], msg["inputs"])}
        if op == "forget":
            self.forget()
            return {"ok": True}
        raise ValueError(f"unknown referee request {op!r}")


def serve(conn, device_index: int) -> None:
    """The referee process's loop (started by the pool beside each worker)."""
    import torch.multiprocessing  # noqa: F401 - registers the CUDA-tensor (IPC) reductions with the pickler

    device = "cpu" if device_index < 0 else "cuda"
    if device == "cuda":
        try:
            torch.cuda.set_device(device_index)
            torch.zeros(1, device="cuda")
        except Exception as exc:  # noqa: BLE001 - no usable GPU (a CPU-only torch, no driver): said to the worker,
            # whose evaluations report it (INFRA_ERROR), instead of a traceback on the user's terminal
            reason = f"the referee could not start on GPU {device_index}: {type(exc).__name__}: {exc}"
            return _answer(conn, lambda msg: {"ok": False, "error": reason})
    core = RefereeCore(device)
    core.warm_up()
    _answer(conn, core.handle, synchronize=device == "cuda")


def _answer(conn, handle, synchronize: bool = False) -> None:
    """Each request answered in order by `handle`, until the worker says exit or goes away."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg.get("op") == "exit":
            return
        try:
            reply = handle(msg)
        except Exception:  # noqa: BLE001 - reported to the worker as a harness fault
            reply = {"ok": False, "error": traceback.format_exc(limit=8)}
        msg = None  # drop the mapped tensors before answering, so the worker may reuse its buffers at once
        if synchronize:
            torch.cuda.synchronize()
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):  # the worker is gone (replaced after a fault): so is this referee's job
            return


class RefereeClient:
    """The worker's end: requests are sent at once and answered in order; `prepare_async` lets the referee
    compute the next trial's reference while the candidate runs this one."""

    def __init__(self, conn, timeout_s: float = 900.0):
        import torch.multiprocessing  # noqa: F401 - registers the CUDA-tensor (IPC) reductions with the pickler

        self.conn = conn
        self.timeout_s = timeout_s
        self.pending: list[str] = []  # ops sent whose replies have not been read
        self.digests: dict[tuple, list] = {}

    def _send(self, msg: dict) -> None:
        try:
            self.conn.send(msg)
        except (OSError, ValueError, BrokenPipeError) as e:
            raise RefereeError(f"the referee process is gone ({e})") from None
        self.pending.append(msg["op"])

    def _reply(self) -> dict:
        try:
            if not self.conn.poll(self.timeout_s):
                raise RefereeError(f"the referee did not answer within {self.timeout_s:g} s")
            reply = self.conn.recv()
        except (EOFError, OSError) as e:
            raise RefereeError(f"the referee process is gone ({e})") from None
        self.pending.pop(0)
        if not reply.get("ok"):
            raise RefereeError("the referee failed:\n" + reply.get("error", ""))
        return reply

    def _drain_to_last(self) -> dict:
        """Read replies up to the last request sent (earlier ones are prepares: their digests are kept)."""
        reply = {}
        while self.pending:
            op = self.pending[0]
            reply = self._reply()
            if op == "prepare":
                self.digests[reply.get("key", ())] = reply["digest"]
        return reply

    def prepare_async(self, workload: str, seed: int, dist: str) -> None:
        self._send({"op": "prepare", "workload": workload, "seed": seed, "dist": dist})

    def prepare(self, workload: str, seed: int, dist: str) -> list:
        self.prepare_async(workload, seed, dist)
        return self._drain_to_last()["digest"]

    def judge(self, workload: str, seed: int, dist: str, trial: int, outputs: dict, inputs: dict) -> list[dict]:
        self._send({"op": "judge", "workload": workload, "seed": seed, "dist": dist, "trial": trial,
                    "outputs": outputs, "inputs": inputs})
        return self._drain_to_last()["stats"]

    def changed_inputs(self, workload: str, seed: int, dist: str, inputs: dict) -> list[str]:
        self._send({"op": "inputs", "workload": workload, "seed": seed, "dist": dist, "inputs": inputs})
        return self._drain_to_last()["changed"]

    def forget(self) -> None:
        self._send({"op": "forget"})
        self._drain_to_last()
