"""The system prompt and the task message of a trajectory, built from prompts/ and the workload definition."""
from __future__ import annotations

from string import Template

from ptxbench import prompts
from ptxbench.workloads.arch import get_arch
from ptxbench.workloads.schema import Workload

from .state import OptimizeConfig


def system_prompt(config: OptimizeConfig) -> str:
    variant = prompts.variant(config.prompt)
    parts = [prompts.load(name) for name in variant.system]
    if config.mode == "tools":
        parts.append(prompts.load("system_tools"))
    return "\n".join(p.strip() + "\n" for p in parts)


def _tensor_rows(workload: Workload) -> str:
    rows = []
    for t in workload.tensors:
        shape = "[" + ", ".join(t.shape) + "] = " + str(list(workload.shape(t.name)))
        rows.append(f"| {t.name} | {t.role} | {t.dtype} | {shape} | {t.doc} |")
    return "\n".join(rows)


def target_reason(config: OptimizeConfig, workload: Workload) -> str:
    if config.target_speedup is None:
        from ptxbench.workloads.targets import default_target

        return default_target(workload, config.arch).reason
    return "the target this run was given" if config.target_speedup else "no target was set: as fast as you can"


TOLERANCE_WORDS = {"atol": "atol", "rtol": "rtol", "max_rel_fro": "relative Frobenius error"}
# workloads/inputs.py's SPIKE_PROB and SPIKE_SCALE in words (importing it would bring torch into the agent's process)
DIST_WORDS = {"normal": "standard normal", "spiky": "heavy tails: one element in a thousand ten times larger"}


def task_prompt(config: OptimizeConfig, workload: Workload) -> str:
    arch = get_arch(config.arch)
    variant = prompts.variant(config.prompt)
    knowledge = "\n".join(prompts.load_optional(name.format(arch=config.arch.replace("sm_", "sm"))) or
                          prompts.load_optional(name.format(arch=config.arch)) for name in variant.knowledge)
    symbols = ", ".join(f"{k} = {v:.6g}" if isinstance(v, float) else f"{k} = {v}" for k, v in workload.symbols.items())
    values = {
        "title": workload.title,
        "workload_id": workload.id,
        "op": workload.op,
        "arch": arch.name,
        "gpus": ", ".join(arch.gpus),
        "symbols": symbols,
        "tensors": _tensor_rows(workload),
        "doc": workload.doc,
        "trials": config.trials or workload.trials,
        "atol": workload.tolerance.atol,
        "rtol": workload.tolerance.rtol,
        "max_rel_fro": workload.tolerance.max_rel_fro,
        "tensor_rules": "".join(f" {name} is held to its own bounds: " + ", ".join(
            f"{TOLERANCE_WORDS[k]} {v:g}" for k, v in own.items()) + "." for name, own in workload.tolerance.tensors.items()),
        "other_dists": "".join(f", then one more on `{d}` inputs ({DIST_WORDS[d]})" for d in workload.input_dist[1:]),
        "baseline": workload.primary_baseline.name,
        "gflop": f"{workload.flops / 1e9:.1f}",
        "targets": " and ".join(workload.targets.get(arch.name, [])) or "the arch's tensor-core instructions",
        "turns": config.turns,
        "target_speedup": config.target() or 1.0,
        "target_reason": target_reason(config, workload),
        "solution_format": prompts.load("solution_format"),
        "knowledge": knowledge,
    }
    return Template(prompts.load("task")).safe_substitute(values).strip() + "\n"
