"""The runtime target-instruction verdict: did the hardware execute the family's SASS instructions?

Per family of the arch profile (workloads/arch.py), from one profile:
- executed: the SASS has the family's opcodes and ncu counted predicate-true executions > 0
  (`sass__thread_inst_executed_true_per_opcode`, as PTXBench reads the source page);
- token: executed, but the family's work counter (its FLOPs on the tensor path, the bytes TMA loaded) holds less
  than TOKEN_SHARE of the workload's (its FLOPs, its inputs' bytes): one wgmma or one TMA load beside a kernel
  that does its work another way is not a kernel that uses them (given the workload's work: `expected_work`); so is
  a family that did the work beside the same work counted another way (its `elsewhere` counters, e.g. CUDA-core
  FLOPs beside wgmma, the inputs' bytes read by plain loads or cp.async beside TMA, at TOKEN_SHARE of the
  workload's or more, plus the op's allowance): a decoy, wgmma run on anything while the output is computed with
  FFMA, TMA loading the inputs while the output is computed from plain loads;
- present_not_executed: in the SASS, never executed (dead code, a branch never taken);
- absent: not in the SASS at all;
- unknown: no profile, missing/NaN counts, or the per-opcode counts and the family's pipe counters
  disagree (e.g. HGMMA counted but the GMMA pipe idle) -- always with the reason.
Warp-level `sass__inst_executed_per_opcode` counts predicated-off warps too (FACTS.md), so it is
reported but never decides.

At the `verdict` level (a profile without the per-opcode counts: those patch the kernel and cost most of a
cheap pass) the family's instruction counters decide instead: the hardware counters that the full level
cross-checks against the predicate-true per-opcode counts (`counter_opcodes`: the GMMA pipe's HGMMA
executions, the TMA instructions issued with a true predicate), non-zero = executed. Every full profile (the
first passing turn, each new best) still takes the per-opcode counts and their cross-check.
"""
from __future__ import annotations

from fnmatch import fnmatchcase

import math

from ptxbench.tools.gpu.limits import ELEM_BYTES
from ptxbench.tools.results import RuntimeTarget
from ptxbench.workloads.arch import ArchProfile, TargetFamily
from ptxbench.workloads.schema import Workload

from .summary import KernelProfile, ProfileSummary


# Below this share of the workload's work the family's use is a token. An honest kernel's share is about 1 or more
# (the main GEMM's HGMMA FLOPs are exactly its 2MNK; causal attention computes its diagonal tiles whole; TMA
# re-reads tiles), so half leaves room for a kernel that does some of its work elsewhere, and none for one that
# does almost all of it elsewhere.
TOKEN_SHARE = 0.5


def _tensor_bytes(wl: Workload, name: str) -> float:
    return float(math.prod(wl.shape(name)) * ELEM_BYTES[wl.tensor(name).dtype])


def expected_work(wl: Workload) -> dict[str, float]:
    """The workload's work in the units of the families' work counters: its FLOPs, its inputs' bytes."""
    return {"flops": float(wl.flops), "input_bytes": sum(_tensor_bytes(wl, t.name) for t in wl.inputs)}


def design_allowance(fam: TargetFamily, wl: Workload | None, total: float) -> float:
    """The share of the workload's `total` work that its op's honest kernels do another way by design
    (`fam.elsewhere_allowance`: tensors of the workload -> multiples of their bytes); 0 without a workload."""
    spec = fam.elsewhere_allowance.get(wl.op, {}) if wl is not None else {}
    return sum(times * _tensor_bytes(wl, name) for name, times in spec.items()) / total


def _with_share(fam: TargetFamily, executed: RuntimeTarget, counters: dict[str, float],
                work: dict[str, float] | None, wl: Workload | None = None) -> RuntimeTarget:
    """An executed verdict with the share of the workload's work the family did, and the share done another way; a
    token when the first is small or the second is not (past TOKEN_SHARE plus what the op's honest kernels do another
    way by design: design_allowance)."""
    if not work or not fam.work_counter or fam.work_counter not in counters or not work.get(fam.work):
        return executed
    share = counters[fam.work_counter] / work[fam.work]
    executed.work_share = share
    unit = "FLOPs" if fam.work == "flops" else "bytes of its inputs"
    if share < TOKEN_SHARE:
        return executed.model_copy(update={
            "verdict": "token",
            "reason": f"{fam.name} executed, but {fam.work_counter} = {counters[fam.work_counter]:,.0f} is "
                      f"{100 * share:.3g}% of the workload's {work[fam.work]:,.0f} {unit} (less than "
                      f"{100 * TOKEN_SHARE:.0f}%): the work is done another way. " + executed.reason})
    other = {c: counters[c] * per for c, per in fam.elsewhere.items() if c in counters}
    if not other:
        return executed
    executed.elsewhere_share = sum(other.values()) / work[fam.work]
    limit = TOKEN_SHARE + design_allowance(fam, wl, work[fam.work])
    if executed.elsewhere_share < limit:
        return executed
    counted = ", ".join(f"{c} = {counters[c]:,.0f}" for c in other)
    return executed.model_copy(update={
        "verdict": "token",
        "reason": f"{fam.name} did {100 * share:.3g}% of the workload's {unit}, but the same work is counted another way "
                  f"too: {counted}, {100 * executed.elsewhere_share:.3g}% of the workload's {work[fam.work]:,.0f} "
                  f"{unit} (at least {100 * limit:.0f}%): the output is computed elsewhere and {fam.name} runs "
                  "beside it (a decoy). " + executed.reason})


def _family_sum(counts: dict[str, float] | None, fam: TargetFamily, opcodes: list[str] | None = None) -> float | None:
    if counts is None:
        return None
    if opcodes is not None:  # glob patterns on the opcode's first dotted part, e.g. 'UTC*MMA'
        keep = lambda op: any(fnmatchcase(op.split(".", 1)[0], pat) for pat in opcodes)  # noqa: E731
    else:
        keep = fam.matches_opcode
    return sum(v for op, v in counts.items() if keep(op))


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _present(fam: TargetFamily, kernels: list[KernelProfile], static_opcodes: dict[str, int] | None) -> bool | None:
    """In the SASS? From the source page of the profiled kernels, else from the compile's histogram."""
    seen: list[bool] = []
    if any(k.sass_present is not None for k in kernels):
        seen.append(any(fam.matches_opcode(op) for k in kernels for op in (k.sass_present or [])))
    if static_opcodes is not None:
        seen.append(any(fam.matches_opcode(op) and n > 0 for op, n in static_opcodes.items()))
    return any(seen) if seen else None


def family_verdict(fam: TargetFamily, summary: ProfileSummary, static_opcodes: dict[str, int] | None = None,
                   work: dict[str, float] | None = None, wl: Workload | None = None) -> RuntimeTarget:
    if not summary.ok:
        return RuntimeTarget(verdict="unknown", reason=f"no profile: {summary.error or 'ncu gave no result'}")
    kernels = summary.kernels
    if not kernels:
        return RuntimeTarget(verdict="unknown", reason="ncu profiled no kernel in the plan's NVTX range")
    warp = _sum([_family_sum(k.opcodes, fam) for k in kernels])
    thread_true = _sum([_family_sum(k.opcodes_true, fam) for k in kernels])
    counters = {c: v for c in fam.collected if (v := _sum([k.counters.get(c) for k in kernels])) is not None}
    present = _present(fam, kernels, static_opcodes)
    base = dict(executed_warp_insts=int(warp) if warp is not None else None,
                executed_thread_insts_true=int(thread_true) if thread_true is not None else None,
                counter_values=counters)
    if thread_true is None and summary.mode == "verdict":
        return _with_share(fam, v, counters, work, wl) if (v := _counter_verdict(fam, counters, present, base)).verdict \
            == "executed" else v
    if thread_true is None:
        missing = [c for c in fam.counters if c not in counters]
        return RuntimeTarget(verdict="unknown", reason="ncu returned no per-opcode predicate-true counts (missing or NaN)"
                             + (f"; missing counters: {', '.join(missing)}" if missing else ""), **base)
    # Cross-check: an instruction counter is non-zero exactly when the opcodes it counts executed.
    disagree = []
    for counter, opcodes in fam.counter_opcodes.items():
        if counter not in counters:
            continue
        ran = _sum([_family_sum(k.opcodes_true, fam, opcodes) for k in kernels]) or 0.0
        if (ran > 0) != (counters[counter] > 0):
            disagree.append(f"{'/'.join(opcodes)} predicate-true count {ran:g} but {counter} = {counters[counter]:g}")
    if disagree:
        return RuntimeTarget(verdict="unknown", reason="per-opcode counts and pipe counters disagree: " + "; ".join(disagree), **base)
    if thread_true > 0:
        executed = RuntimeTarget(verdict="executed", reason=_executed_reason(fam, warp, thread_true, counters), **base)
        return _with_share(fam, executed, counters, work, wl)
    return _not_executed(fam, present, base, "executed", "none executed with a true predicate")


def _not_executed(fam: TargetFamily, present: bool | None, base: dict, verb: str, none_ran: str) -> RuntimeTarget:
    """Nothing of the family ran: present_not_executed or absent by the SASS listing, unknown without one."""
    if present is None:
        return RuntimeTarget(verdict="unknown", reason=f"no {fam.name} instruction {verb}, and without the SASS listing "
                             "it is not known whether the kernel has any", **base)
    if present:
        return RuntimeTarget(verdict="present_not_executed", reason=f"the SASS has {'/'.join(fam.sass)} but {none_ran} "
                             "(dead code or a branch never taken)", **base)
    return RuntimeTarget(verdict="absent", reason=f"no {'/'.join(fam.sass)} instruction in the SASS", **base)


def _counter_verdict(fam: TargetFamily, counters: dict[str, float], present: bool | None, base: dict) -> RuntimeTarget:
    decisive = list(fam.counter_opcodes)
    missing = [c for c in decisive if c not in counters]
    if not decisive or missing:
        return RuntimeTarget(verdict="unknown", reason=f"the verdict pass has no {', '.join(missing) or 'instruction'} "
                             f"counter for {fam.name} (missing or NaN)", **base)
    if any(counters[c] > 0 for c in decisive):
        if present is False:  # counted but not in the SASS: the counter is not what it claims
            return RuntimeTarget(verdict="unknown", reason=f"{', '.join(decisive)} counted {fam.name} work but the SASS "
                                 f"has no {'/'.join(fam.sass)}", **base)
        return RuntimeTarget(verdict="executed", reason=f"{fam.name}: " + ", ".join(
            f"{c} = {v:,.0f}" for c, v in counters.items()) + " (hardware counters; no per-opcode pass at this level)", **base)
    return _not_executed(fam, present, base, "counted", f"{', '.join(decisive)} counted none")


def _executed_reason(fam: TargetFamily, warp: float | None, thread_true: float, counters: dict[str, float]) -> str:
    parts = [f"{fam.name}: {thread_true:,.0f} predicate-true thread executions"]
    if warp is not None:
        parts.append(f"{warp:,.0f} warp-level")
    parts += [f"{c} = {v:,.0f}" for c, v in counters.items()]
    return ", ".join(parts)


def runtime_verdicts(arch: ArchProfile, summary: ProfileSummary, families: list[str] | None = None,
                     static_opcodes: dict[str, int] | None = None,
                     work: dict[str, float] | None = None, wl: Workload | None = None) -> dict[str, RuntimeTarget]:
    """family name -> verdict for `families` (default: every family of the arch profile).

    `static_opcodes` is the compile's SASS histogram summed over the module's kernels (opcode -> count); `work` the
    workload's (expected_work), without which no verdict is a token; `wl` the workload (its op's decoy allowance)."""
    names = families if families is not None else [f.name for f in arch.families]
    return {name: family_verdict(arch.family(name), summary, static_opcodes, work, wl) for name in names}


def static_histogram(kernels: dict) -> dict[str, int]:
    """CompileResult.kernels -> one opcode histogram over every kernel of the module."""
    total: dict[str, int] = {}
    for k in kernels.values():
        for op, n in (k.sass_opcodes if hasattr(k, "sass_opcodes") else k.get("sass_opcodes", {})).items():
            total[op] = total.get(op, 0) + n
    return total
