"""Turn a profile into short, ranked feedback a model can act on (template: prompts/feedback_profile.md).

A headline (bottleneck from speed-of-light, achieved vs. peak) and findings ranked by how much
they should matter: target instructions not executed, ptxas spills, excess DRAM traffic over the
workload's minimum bytes, the top warp stalls with their share, occupancy and its limiter, and
ncu's rules with their estimated gains. Findings are added in rank order until the token budget
is reached (tiktoken's cl100k when it is installed with its encoding cached, else 4 characters a
token), so the text never exceeds the budget.
"""
from __future__ import annotations

import functools
import math
import re

from ptxbench.prompts import load
from ptxbench.tools.results import CompileResult, RuntimeTarget
from ptxbench.workloads.arch import get_arch
from ptxbench.workloads.schema import Workload

from .summary import KernelProfile, ProfileSummary

DEFAULT_BUDGET = 450
# Dense bf16 TFLOP/s and HBM GB/s when ncu's device name is not in the datasheet table.
FALLBACK_PEAK = (989.0, 4800.0)


@functools.cache
def template() -> dict[str, dict[str, str] | str]:
    """Sections of prompts/feedback_profile.md: 'frame' as text, the others as key -> sentence."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in load("feedback_profile").splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    out: dict = {"frame": "\n".join(sections.pop("frame", [])).strip()}
    for name, lines in sections.items():
        out[name] = dict(ln.split(": ", 1) for ln in lines if re.match(r"^\w+: ", ln))
    return out


@functools.cache
def _encoder():
    try:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base")
    except Exception:  # not installed, or its encoding file cannot be fetched offline
        return None


def count_tokens(text: str, exact: bool = True) -> int:
    enc = _encoder() if exact else None
    return len(enc.encode(text)) if enc is not None else math.ceil(len(text) / 4)


def _peak(gpu: str) -> tuple[float, float]:
    from ptxbench.tools.gpu.ceilings import datasheet_peak

    return datasheet_peak(gpu) or FALLBACK_PEAK


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def headline(s: ProfileSummary, wl: Workload | None) -> str:
    k = s.main_kernel()
    if k is None:
        return "no kernel was profiled."
    c, m = k.compute_sol_pct, k.memory_sol_pct
    kind = k.bottleneck
    if kind == "memory":
        units = {"DRAM": k.dram_sol_pct, "L2": k.l2_sol_pct, "L1": k.l1_sol_pct}
        unit = max(((u, v) for u, v in units.items() if v is not None), key=lambda x: x[1], default=("memory", m))
        text = f"memory-bound: {unit[0]} at {unit[1]:.0f}% of its peak throughput, compute at {c or 0:.0f}%."
    elif kind == "compute":
        pipe = next(iter(k.top_pipes.items()), None)
        busiest = f", busiest pipe {pipe[0]} at {pipe[1]:.0f}%" if pipe else ""
        text = f"compute-bound: SM throughput at {c:.0f}% of peak{busiest}, memory at {m or 0:.0f}%."
    elif kind == "latency":
        text = (f"latency-bound: neither compute ({c or 0:.0f}%) nor memory ({m or 0:.0f}%) is near its peak, "
                "so warps mostly wait (see the stalls).")
    else:
        text = "the speed-of-light section is missing."
    total = s.duration_us
    if total and wl is not None and wl.flops > 0:
        tflops = wl.flops / (total * 1e-6) / 1e12
        peak, _hbm = _peak(s.gpu)
        if tflops <= 1.5 * peak:  # above that the profiled launches are not the whole workload
            text += f" {total:,.1f} us = {tflops:.0f} TFLOP/s, {100 * tflops / peak:.0f}% of the {peak:.0f} TFLOP/s bf16 peak."
        else:
            text += f" {total:,.1f} us."
    elif total:
        text += f" {total:,.1f} us."
    return text


def _verdict_items(verdicts: dict[str, RuntimeTarget], arch: str) -> list[tuple[float, str]]:
    t = template()
    items = []
    profile = get_arch(arch)
    for name, v in verdicts.items():
        if v.verdict == "executed":
            continue
        fam = profile.family(name)
        text = t["verdict"][v.verdict].format(family=name, opcodes="/".join(fam.sass), ptx=fam.ptx[0],
                                              what=t["what"].get(name, name), reason=v.reason)
        items.append((1000.0 if v.verdict != "unknown" else 50.0, text))
    return items


def _spill_items(compile_result: CompileResult | None) -> list[tuple[float, str]]:
    if compile_result is None:
        return []
    out = []
    for k in compile_result.kernels.values():
        if k.spill_stores or k.spill_loads:
            out.append((500.0, template()["other"]["spills"].format(kernel=k.name, stores=k.spill_stores, loads=k.spill_loads)))
    return out


def _kernel_items(k: KernelProfile, wl: Workload | None, total_dram: float | None) -> list[tuple[float, str]]:
    t = template()
    items: list[tuple[float, str]] = []
    if total_dram and wl is not None and wl.min_bytes > 0 and total_dram > 1.5 * wl.min_bytes:
        ratio = total_dram / wl.min_bytes
        weight = 40.0 * min(ratio, 10) if k.bottleneck == "memory" else 10.0 * min(ratio, 10)
        items.append((weight, t["other"]["traffic"].format(moved=_fmt_bytes(total_dram), minimum=_fmt_bytes(wl.min_bytes), ratio=ratio)))
    total = sum(k.stalls.values())
    stall_items = 0
    if total > 0:
        for reason, value in list(k.stalls.items())[:3]:
            share = 100 * value / total
            advice = t["stall"].get(reason)
            if advice and share >= 10 and reason not in ("not_selected", "selected"):
                items.append((share, f"{share:.0f}% of warp stall cycles are '{reason}': {advice}"))
                stall_items += 1
    th, ach = k.theoretical_occupancy_pct, k.achieved_occupancy_pct
    if th is not None and ach is not None and k.occupancy_limiter:
        if ach < 0.6 * th and th > 0:
            advice = t["other"]["occupancy_imbalance"]
            items.append((30.0, t["other"]["occupancy"].format(achieved=ach, theoretical=th, limiter=k.occupancy_limiter, advice=advice)))
        elif th <= 25 and k.bottleneck == "latency":
            advice = t["other"]["occupancy_latency"]
            items.append((20.0, t["other"]["occupancy"].format(achieved=ach, theoretical=th, limiter=k.occupancy_limiter, advice=advice)))
    if k.tensor_pipe_pct is not None and (k.opcodes or {}).get("HGMMA") and k.tensor_pipe_pct < 50:
        items.append((60.0 - k.tensor_pipe_pct / 2, t["other"]["tensor_idle"].format(pct=k.tensor_pipe_pct)))
    for r in k.rules:
        if r.name == "CPIStall" and stall_items:
            continue  # the stall items above say the same with advice
        if r.type == "OPT" and r.speedup_pct:
            msg = _sentences(r.message, 220)
            weight = r.speedup_pct * 0.8
            if "Occupancy" in r.name and (k.opcodes or {}).get("HGMMA"):
                weight *= 0.25  # warp-specialised wgmma kernels run few, large CTAs by design
            items.append((weight, t["other"]["rule"].format(name=r.name, gain=r.speedup_pct, message=msg)))
    return items


def profile_feedback(summary: ProfileSummary, verdicts: dict[str, RuntimeTarget], wl: Workload | None,
                     compile_result: CompileResult | None = None, *, arch: str = "sm_90a",
                     token_budget: int = DEFAULT_BUDGET, max_items: int = 6) -> str:
    """The feedback text; at most `token_budget` tokens (count_tokens)."""
    if not summary.ok:
        return f"No profile could be taken: {summary.error}."
    k = summary.main_kernel()
    items = _verdict_items(verdicts, arch) + _spill_items(compile_result)
    if k is not None:
        dram = [x.dram_bytes for x in summary.kernels if x.dram_bytes is not None]
        items += _kernel_items(k, wl, sum(dram) if dram else None)
    items.sort(key=lambda x: -x[0])
    where = f"{len(summary.kernels)} launch(es)" + (f", the longest is {k.name}" if k is not None and len(summary.kernels) > 1 else
                                                    f": {k.name}" if k is not None else "")
    frame = template()["frame"]
    text = frame.format(gpu=summary.gpu or "the GPU", where=where, headline=headline(summary, wl), items="")
    if count_tokens(text) > token_budget:
        return _truncate(text, token_budget)
    chosen: list[str] = []
    for _, item in items[:max_items]:
        trial = frame.format(gpu=summary.gpu or "the GPU", where=where, headline=headline(summary, wl),
                             items=_numbered(chosen + [item]))
        if count_tokens(trial) > token_budget:
            break
        chosen.append(item)
    if not chosen:
        chosen = ["nothing stands out: the kernel is close to what its bottleneck allows."] if not items else []
    return frame.format(gpu=summary.gpu or "the GPU", where=where, headline=headline(summary, wl),
                        items=_numbered(chosen)).strip()


def _sentences(text: str, limit: int) -> str:
    """Whole sentences of `text` up to about `limit` characters (at least one)."""
    out = ""
    for sentence in re.split(r"(?<=\.)\s+", text.strip()):
        if out and len(out) + len(sentence) > limit:
            break
        out = f"{out} {sentence}".strip()
    return out


def _numbered(items: list[str]) -> str:
    return "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))


def _truncate(text: str, budget: int) -> str:
    while text and count_tokens(text) > budget:
        text = text[: int(len(text) * 0.9)]
    return text.rstrip() + " ..."
