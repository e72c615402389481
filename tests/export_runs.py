"""Builds small recorded runs by hand (real event files through agent/records/rundir.py) for the export tests."""
from __future__ import annotations

from pathlib import Path

from ptxbench.agent.records.events import EvalEvent, ModelCall, TrajectoryStart, TurnEnd
from ptxbench.agent.records.rundir import TrajectoryWriter, sha256_text, write_manifest

SYSTEM = "You write sm_90a kernels."


def kernel(tag: str) -> str:
    return f"/* ptxbench\nlanguage = \"cuda\"\n[[launch]]\nkernel = \"k\"\ngrid = [\"M // 128\"]\nblock = [128]\nargs = [\"C\"]\n*/\n// variant {tag}\nextern \"C\" __global__ void k(float* C) {{ int variant_{tag} = 0; }}\n"


def result(status: str, speedup: float | None = None, executed: bool | None = None) -> dict:
    r: dict = {"workload": "w", "status": status, "gpu_evaluated": True}  # as the GPU evaluator writes it
    if speedup is not None:
        r["timing"] = {"candidate": {"median_ms": 1.0, "ci_low_ms": 1.0, "ci_high_ms": 1.0, "n": 1}, "speedup": speedup}
    if executed is not None:
        verdict = "executed" if executed else "present_not_executed"
        r["targets_runtime"] = {"wgmma": {"verdict": verdict}, "tma": {"verdict": "executed"}}
    return r


def write_trajectory(run: Path, tid: str, workload: str, turns: list[tuple[str, dict, str]], held_out: bool = False,
                     model: str = "m1", mode: str = "pipeline", system: str = SYSTEM) -> None:
    """turns: (kernel tag, result dict, feedback text) per turn; `system`: the system prompt the model saw."""
    w = TrajectoryWriter(run / "trajectories" / tid)
    w.append(TrajectoryStart(trajectory_id=tid, workload=workload, model=model, prompt="basic", mode=mode,
                             held_out=held_out))
    history = [{"role": "system", "content": system}, {"role": "user", "content": f"Write {workload}."}]
    for i, (tag, res, feedback) in enumerate(turns, start=1):
        src = kernel(tag)
        w.append(ModelCall(trajectory_id=tid, turn=i, model=model, messages=list(history),
                           response={"content": f"```cuda\n{src}```"}))
        rel = w.save_kernel(i, "cuda", src)
        w.append(EvalEvent(trajectory_id=tid, turn=i, kernel_file=rel, kernel_sha256=sha256_text(src), language="cuda",
                           result=res, feedback=feedback))
        w.append(TurnEnd(trajectory_id=tid, turn=i, status=res["status"]))
        history += [{"role": "assistant", "content": src}, {"role": "user", "content": feedback}]


def build_run(root: Path) -> Path:
    run = root / "run1"
    write_manifest(run, {"gpu": {"name": "NVIDIA H200"}})
    # t1: compile error -> passed+executed (fixit row), then a faster pass (kernelgen rows: turns 2, 3)
    write_trajectory(run, "t1", "gemm_bf16_m8192_n7168_k5120", [
        ("a", result("COMPILE_ERROR"), "line 3: ptxas error: unknown symbol"),
        ("b", result("PASSED", 0.8, True), "passed, 0.80x"),
        ("c", result("PASSED", 0.95, True), "passed, 0.95x"),
    ])
    # t2: numerical error -> passed but target NOT executed (no fixit row under the default filter)
    write_trajectory(run, "t2", "mha_fwd_d128", [
        ("d", result("INCORRECT_NUMERICAL"), "max abs error 3.1 at [0, 1, 7, 2]"),
        ("e", result("PASSED", 0.5, False), "passed, 0.50x, wgmma present but not executed"),
    ])
    # t3: a duplicate of t1's fix (same kernels up to comments) and a held-out trajectory
    write_trajectory(run, "t3", "gemm_bf16_m8192_n7168_k5120", [
        ("a", result("COMPILE_ERROR"), "line 3: ptxas error: unknown symbol"),
        ("b", result("PASSED", 0.8, True), "passed, 0.80x"),
    ])
    write_trajectory(run, "t4", "mha_fwd_d64", [
        ("f", result("RUNTIME_ERROR"), "CUDA_ERROR_ILLEGAL_ADDRESS"),
        ("g", result("PASSED", 0.7, True), "passed"),
    ], held_out=True)
    return run


def write_start_from_run(run: Path, workload: str, start_result: dict, log: str,
                         start_turn_end: bool = True) -> tuple[str, str, str]:
    """A --start-from trajectory `s`: turn 0 the handed-in kernel (`start_result`, its log `log`, shown in the task),
    turn 1 the model's fix (PASSED, executed). Returns (the start kernel, the fix, the task text)."""
    write_manifest(run, {"gpu": {"name": "NVIDIA H200"}})
    w = TrajectoryWriter(run / "trajectories" / "s")
    w.append(TrajectoryStart(trajectory_id="s", workload=workload, model="m1", prompt="basic", mode="pipeline"))
    start, fixed = kernel("start"), kernel("fixed")
    w.append(EvalEvent(trajectory_id="s", turn=0, kernel_file=w.save_kernel(0, "cuda", start), language="cuda",
                       kernel_sha256=sha256_text(start), result=start_result, feedback=log))
    if start_turn_end:
        w.append(TurnEnd(trajectory_id="s", turn=0, status=start_result["status"]))
    task = f"Write {workload}.\n## The kernel you start from\n```cuda\n{start}```\n### Its evaluation (turn 0)\n{log}"
    w.append(ModelCall(trajectory_id="s", turn=1, model="m1", response={"content": f"```cuda\n{fixed}```"},
                       messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]))
    w.append(EvalEvent(trajectory_id="s", turn=1, kernel_file=w.save_kernel(1, "cuda", fixed), language="cuda",
                       kernel_sha256=sha256_text(fixed), result=result("PASSED", 0.9, True), feedback="passed"))
    w.append(TurnEnd(trajectory_id="s", turn=1, status="PASSED"))
    return start, fixed, task
