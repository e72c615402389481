"""Builds trajectory event files by hand (through the real TrajectoryWriter), for the scoring, report and
bench tests and for docs/report-example. `python3 tests/trajectory_builder.py OUT` writes the sample run."""
from __future__ import annotations

import sys
from pathlib import Path

from ptxbench.agent.records.events import ErrorEvent, EvalEvent, ModelCall, Stop, TrajectoryStart, TurnEnd
from ptxbench.agent.records.rundir import TrajectoryWriter, sha256_text, write_manifest
from ptxbench.tools.results import EvalResult, RuntimeTarget, Timing, TimingStat

TARGETS = ("wgmma", "tma")


def eval_result(workload: str, status: str, speedup: float | None = None, target=None, sol: float | None = None,
                gpu_evaluated: bool | None = None) -> dict:
    """target: True = every family executed, False = wgmma present but not executed, None = not measured.
    gpu_evaluated: default True except for COMPILED; False with PASSED writes the pre-COMPILED record of a no-GPU run."""
    timing = None
    if speedup is not None:
        base = 1.0
        timing = Timing(candidate=TimingStat(median_ms=base / speedup, ci_low_ms=base / speedup * 0.98,
                                             ci_high_ms=base / speedup * 1.02, n=30),
                        baselines={"cublas": TimingStat(median_ms=base, ci_low_ms=0.99, ci_high_ms=1.01, n=30)},
                        primary_baseline="cublas", speedup=speedup,
                        sol_pct=sol if sol is not None else round(50 * speedup, 6))
    runtime = {}
    if target is True:
        runtime = {t: RuntimeTarget(verdict="executed", executed_warp_insts=1024) for t in TARGETS}
    elif target is False:
        runtime = {"wgmma": RuntimeTarget(verdict="present_not_executed", executed_warp_insts=0),
                   "tma": RuntimeTarget(verdict="executed", executed_warp_insts=64)}
    message = {"PASSED": "All trials matched the reference."}.get(status, f"{status}: see the log.")
    return EvalResult(workload=workload, status=status, message=message, timing=timing, targets_runtime=runtime,
                      gpu_evaluated=status != "COMPILED" if gpu_evaluated is None else gpu_evaluated,
                      seconds={"compile": 0.4, "gpu": 1.5}).model_dump(mode="json")


class TrajectoryBuilder:
    def __init__(self, run_dir: Path, tid: str, model: str, workload: str, prompt: str = "default",
                 gpu: str = "NVIDIA H200", index: int = 0, mode: str = "pipeline", config: dict | None = None):
        self.workload = workload
        self.model = model
        self.tid = tid
        self.writer = TrajectoryWriter(Path(run_dir) / "trajectories" / tid)
        self.writer.append(TrajectoryStart(trajectory_id=tid, workload=workload, model=model, prompt=prompt,
                                           mode=mode, index=index, gpu=gpu, config=config or {}))
        self.source = "// turn 0\n"

    def _model_call(self, turn: int, source: str) -> None:
        self.writer.append(ModelCall(trajectory_id=self.tid, turn=turn, model=self.model,
                                     messages=[{"role": "user", "content": f"Write the kernel for {self.workload}."}],
                                     response={"content": f"```ptx\n{source}```"},
                                     usage={"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500},
                                     latency_s=2.0))

    def turn(self, turn: int, status: str, speedup: float | None = None, target=None, sol: float | None = None,
             gpu_evaluated: bool | None = None) -> "TrajectoryBuilder":
        source = self.source + f".reg .b32 r{turn}; // {status}\n"
        self._model_call(turn, source)
        rel = self.writer.save_kernel(turn, "ptx", source)
        result = eval_result(self.workload, status, speedup, target, sol, gpu_evaluated)
        self.writer.append(EvalEvent(trajectory_id=self.tid, turn=turn, kernel_file=rel, kernel_sha256=sha256_text(source),
                                     language="ptx", result=result, feedback=f"Turn {turn}: {result['message']}"))
        self.writer.append(TurnEnd(trajectory_id=self.tid, turn=turn, status=status, speedup=speedup, tokens=1500, elapsed_s=3.0))
        self.source = source
        return self

    def no_submission(self, turn: int, status: str = "NO_SUBMISSION") -> "TrajectoryBuilder":
        self._model_call(turn, "no code block")
        self.writer.append(TurnEnd(trajectory_id=self.tid, turn=turn, status=status, tokens=1500))
        return self

    def infra(self, turn: int, message: str = "GPU worker lost", traceback: str = "") -> "TrajectoryBuilder":
        """What agent/loop/graph.py writes when the evaluator fails: the INFRA_ERROR result, an infra error event,
        the turn closed as NO_SUBMISSION, a stop."""
        self._model_call(turn, self.source)
        self.writer.append(EvalEvent(trajectory_id=self.tid, turn=turn, result=eval_result(self.workload, "INFRA_ERROR"),
                                     feedback=""))
        self.writer.append(ErrorEvent(trajectory_id=self.tid, turn=turn, where="graph" if traceback else "evaluate",
                                      message=message, traceback=traceback, infra=True))
        self.writer.append(TurnEnd(trajectory_id=self.tid, turn=turn, status="NO_SUBMISSION"))
        return self.stop("infra_error", turn - 1)

    def stop(self, reason: str = "turn_limit", turn: int = 0) -> "TrajectoryBuilder":
        self.writer.append(Stop(trajectory_id=self.tid, turn=turn, reason=reason))
        return self


def build_sample_run(run_dir: Path) -> Path:
    """The hand-built run that tests/agent/test_scoring.py scores (its right answers are worked out there).

    CE COMPILE_ERROR, RE RUNTIME_ERROR, IN INCORRECT_NUMERICAL, P PASSED(speedup, target T/F/U)."""
    run_dir = Path(run_dir)
    write_manifest(run_dir, {"kind": "bench", "models": ["m/a", "m/b"], "workloads": ["gemm", "attn"], "turns": 5})
    B = lambda tid, model, wl, **kw: TrajectoryBuilder(run_dir, tid, model, wl, **kw)  # noqa: E731
    # A1: CE, P0.6F, P0.9T, IN
    B("a-gemm-0", "m/a", "gemm", index=0).turn(1, "COMPILE_ERROR").turn(2, "PASSED", 0.6, False) \
        .turn(3, "PASSED", 0.9, True).turn(4, "INCORRECT_NUMERICAL").stop()
    # A2: P1.1T, RE, CE, P1.3U, P1.25T
    B("a-gemm-1", "m/a", "gemm", index=1).turn(1, "PASSED", 1.1, True).turn(2, "RUNTIME_ERROR") \
        .turn(3, "COMPILE_ERROR").turn(4, "PASSED", 1.3, None).turn(5, "PASSED", 1.25, True).stop()
    # A3: CE, then the GPU is lost at turn 2 and never retried: infra-failed
    B("a-gemm-2", "m/a", "gemm", index=2).turn(1, "COMPILE_ERROR").infra(2)
    # A4: NO_SUBMISSION, CE, CE, FORMAT_ERROR
    B("a-gemm-3", "m/a", "gemm", index=3).no_submission(1).turn(2, "COMPILE_ERROR").turn(3, "COMPILE_ERROR") \
        .no_submission(4, "FORMAT_ERROR").stop()
    # A5: P0.8F, infra at turn 2, retried from turn 1: P0.7T
    B("a-gemm-4", "m/a", "gemm", index=4).turn(1, "PASSED", 0.8, False).infra(2).turn(2, "PASSED", 0.7, True).stop()
    # B1: P2.0T (early stop); B2 on attn: CE, CE; B3 with another prompt: P1.5T
    B("b-gemm-0", "m/b", "gemm").turn(1, "PASSED", 2.0, True).stop("target_speedup", 1)
    B("b-attn-0", "m/b", "attn").turn(1, "COMPILE_ERROR").turn(2, "COMPILE_ERROR").stop()
    B("b-gemm-terse-0", "m/b", "gemm", prompt="terse").turn(1, "PASSED", 1.5, True).stop("target_speedup", 1)
    return run_dir


if __name__ == "__main__":
    print(build_sample_run(Path(sys.argv[1])))
