"""Turn a profile into short, ranked feedback a model can act on (template: prompts/feedback_profile.md).

A headline (bottleneck from speed-of-light, achieved vs. peak) and findings ranked by how much
they should matter: target instructions not executed, ptxas spills, excess DRAM traffic over the
workload's minimum bytes, the top warp stalls with their share, occupancy and its limiter, and
ncu's rules with their estimated gains. Findings are added in rank order until the token budget
is reached (tiktoken's cl100k when a local copy holds it, TIKTOKEN_CACHE_DIR or litellm's bundled files, else 4
characters a token: never a download), so the text never exceeds the budget.
"""
from __future__ import annotations

import functools
import math
import re

from ptxbench.prompts import load
from ptxbench.prompts.encodings import encoding
from pydantic import BaseModel, Field

from ptxbench.tools.compile_log import without_host_paths
from ptxbench.tools.regpool import spills_mostly_released
from ptxbench.tools.results import CompileResult, RuntimeTarget, Timing
from ptxbench.tools.textcap import short_name
from ptxbench.workloads.arch import DEFAULT_ARCH, get_arch
from ptxbench.workloads.schema import Workload

from .summary import DRAM_BUSY_PCT, KernelProfile, ProfileSummary, power_limited, traffic_hidden

DEFAULT_BUDGET = 450
AT_ROOF_PCT = 95.0  # from this share of the roofline on, the kernel is told it is at its roof
PAST_ROOF_PCT = 100.0  # and from this one, that it is at or past it (the measured ceilings are medians: beatable)
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
    """cl100k from a local copy (prompts/encodings.py), None without one: a turn's feedback never waits on a
    download (tiktoken's has no timeout)."""
    return encoding("cl100k_base")


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
        unit = busiest_memory(k)
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
    text += power_clock(s, k)
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


def power_clock(s: ProfileSummary, k: KernelProfile) -> str:
    """' The SMs ran at ... MHz ...' when a compute-bound kernel ran well under the SMs' top clock: on the H200 the
    main GEMM runs 1.17 M cycles whatever its values, at 1,600-1,640 MHz on randn and 1,800 on zeros, so its time is
    set by the power its data draws, and changes compare by cycles and by energy (bench/results/gemm_sweep.md rounds
    26-28). Empty otherwise."""
    from ptxbench.tools.gpu.ceilings import max_sm_mhz

    top, clock = max_sm_mhz(s.gpu), k.clock_mhz  # the clock its cycles were counted at: cycles over it are its time
    if not k.elapsed_cycles or not power_limited(k.bottleneck, clock, top):
        return ""
    return " " + template()["other"]["power_clock"].format(mhz=clock, top=top, cycles=k.elapsed_cycles)


class Standing(BaseModel):
    """Where the kernel stands (the feedback's first line): its time against the roofline and the library."""

    now_us: float | None = None
    roof_us: float | None = None
    source: str = Field("", description="'measured' (the evaluation's timing and device ceilings) or 'datasheet'")
    library: str = ""
    library_us: float | None = None
    speedup: float | None = None

    @property
    def headroom_us(self) -> float | None:
        return max(0.0, self.now_us - self.roof_us) if self.now_us and self.roof_us else None

    @property
    def roof_pct(self) -> float | None:
        return 100.0 * self.roof_us / self.now_us if self.now_us and self.roof_us else None


def standing(s: ProfileSummary, wl: Workload | None, timing: Timing | None) -> Standing:
    from ptxbench.tools.gpu.ceilings import roofline_ms

    if timing is not None:
        st = Standing(now_us=timing.candidate.median_ms * 1e3, speedup=timing.speedup, library=timing.primary_baseline)
        if (base := timing.baselines.get(timing.primary_baseline)) is not None:
            st.library_us = base.median_ms * 1e3
        if wl is not None and {"tflops_bf16", "hbm_gbps"} <= set(timing.ceilings):
            st.roof_us, st.source = roofline_ms(wl.flops, wl.min_bytes, timing.ceilings) * 1e3, "measured"
        return st
    st = Standing(now_us=s.duration_us)
    if wl is not None and wl.flops > 0:
        peak, hbm = _peak(s.gpu)
        roof = roofline_ms(wl.flops, wl.min_bytes, {"tflops_bf16": peak, "hbm_gbps": hbm}) * 1e3
        if st.now_us and roof <= 1.05 * st.now_us:  # above that the profiled launches are not the whole workload
            st.roof_us, st.source = roof, "datasheet"
    return st


def standing_text(st: Standing) -> str:
    t = template()["standing"]
    if st.now_us is None:
        return ""
    parts = [t["time"].format(now=_fmt_us(st.now_us))]
    if st.roof_pct is not None:
        parts.append(t["roof"].format(roof=_fmt_us(st.roof_us), pct=st.roof_pct, source=st.source))
    if st.speedup is not None and st.library_us:
        parts.append(t["library"].format(speedup=st.speedup, library=st.library or "the library", lib=_fmt_us(st.library_us)))
    text = "; ".join(parts) + "."
    if st.roof_pct is not None and st.roof_pct >= PAST_ROOF_PCT:
        text += " " + t["past_roof"]
    elif st.roof_pct is not None and st.roof_pct >= AT_ROOF_PCT:
        text += " " + t["at_roof"].format(left=_fmt_us(st.headroom_us or 0.0), pct=100 - st.roof_pct)
    return text


def _fmt_pct(pct: float) -> str:
    """'15', or '<1' where a whole percent would read as nothing ('~31.7 us, 0% of the time')."""
    return f"{pct:.0f}" if pct >= 0.5 else "<1"


def _fmt_us(us: float) -> str:
    return f"{us / 1e3:.3g} ms" if us >= 1000 else f"{us:.3g} us"


class Traits(BaseModel):
    """What the kernel already does (SASS features, joined with the runtime verdicts and the launch)."""

    has: set[str] = Field(default_factory=set)

    @property
    def tma_ring(self) -> bool:
        return {"tma_load", "mbarrier_wait"} <= self.has

    @property
    def warp_specialised(self) -> bool:
        return "setmaxnreg" in self.has


def traits(compile_result: CompileResult | None, verdicts: dict[str, RuntimeTarget], k: KernelProfile | None,
           num_sms: int = 132) -> Traits:
    has: set[str] = set()
    if compile_result is not None:
        chosen = [compile_result.kernels[k.name]] if k is not None and k.name in compile_result.kernels else \
            list(compile_result.kernels.values())
        for kr in chosen:
            has |= set(kr.sass_features)
    # a path that is in the SASS but did not run is not something the kernel does
    for family, feats in (("tma", ("tma_load", "tma_multicast")), ("wgmma", ("wgmma",))):
        v = verdicts.get(family)
        if v is not None and v.verdict in ("absent", "present_not_executed", "token"):
            has -= set(feats)
    if k is not None and (ctas := _grid_size(k.grid)) and ctas <= 2 * num_sms:
        has.add("persistent")
    if k is not None and k.registers and k.registers >= 128 and "wgmma" in has:
        has.add("big_registers")
    threads = _grid_size(k.block) if k is not None else None
    if "setmaxnreg" in has and threads and threads >= 384:  # a producer warpgroup and two or more consumers
        has.add("consumer_warpgroups")
    return Traits(has=has)


def _grid_size(grid: str) -> int | None:
    nums = [int(x) for x in re.findall(r"\d+", grid or "")]
    return math.prod(nums) if nums else None


HARNESS_TEXT_CHARS = 300


def harness_text(text: str, limit: int = HARNESS_TEXT_CHARS) -> str:
    """A failure of the profiler as the model may read it: ncu's log lines and a replay's traceback quote the host's
    folders (`File "/home/<user>/.venv/.../replay.py"`), cut to their files' names, and the whole at `limit`."""
    text = without_host_paths(text.strip()).rstrip(".")
    return text if len(text) <= limit else text[:limit].rstrip() + " ..."


def _verdict_items(verdicts: dict[str, RuntimeTarget], arch: str) -> list[tuple[float, str]]:
    t = template()
    items = []
    profile = get_arch(arch)
    for name, v in verdicts.items():
        if v.verdict == "executed":
            continue
        fam = profile.family(name)
        reason = harness_text(v.reason, 2 * HARNESS_TEXT_CHARS) if v.verdict == "unknown" else v.reason
        text = t["verdict"][v.verdict].format(family=name, opcodes="/".join(fam.sass), ptx=fam.ptx[0],
                                              what=t["what"].get(name, name), reason=reason)
        items.append((1000.0 if v.verdict != "unknown" else 50.0, text))
    return items


def _spill_items(compile_result: CompileResult | None, launched: set[str] | None = None) -> list[tuple[float, str]]:
    """Spills of the kernels the profile saw launched (all of the module's when none of their names match: a
    profile that names kernels differently). A module's other entry points (the backward's D = 64 kernels beside
    its D = 128 one) say nothing about this workload."""
    if compile_result is None:
        return []
    kernels = list(compile_result.kernels.values())
    ran = [k for k in kernels if launched and k.name in launched]
    out = []
    for k in ran or kernels:
        if k.spill_stores or k.spill_loads:
            # where the spills sit (tools/regpool.py): the warpgroup that gave registers back needs the other move
            key = "spills_released" if spills_mostly_released(k) else "spills"
            out.append((500.0, template()["other"][key].format(kernel=short_name(k.name), stores=k.spill_stores, loads=k.spill_loads)))
    return out


# SASS opcodes (first dotted part) of integer and predicate arithmetic: a line made only of these computes addresses
# or indices (the backward's dQ tile stores once recomputed theirs per store: 16% of its stall samples).
INTEGER_OPS = frozenset({"IMAD", "IADD3", "IADD", "LOP3", "LEA", "SHF", "VIADD", "ISETP", "SEL", "MOV", "IABS", "PRMT",
                         "PLOP3", "P2R", "R2P", "LOP", "IMNMX", "VIMNMX", "BMSK", "FLO", "POPC", "R2UR"})


# From this share of elapsed cycles on, the tensor pipe is taking wgmmas about as fast as it can.
TENSOR_FULL_PCT = 80.0


def _advice(reason: str, tr: Traits, line_ops: dict[str, int] | None = None, tensor_pct: float | None = None) -> str:
    """The stall advice for `reason`, in the variant that fits what the kernel (and the line) already does."""
    stall = template()["stall"]
    ops = line_ops or {}
    if "SYNCS" in ops and reason not in ("selected", "not_selected"):
        return stall["at_mbarrier_wait"]
    if "HGMMA" in ops and reason == "mio_throttle":
        # a wgmma waiting to issue: the queue into the tensor and shared-memory pipes is full. The GEMM's wgmma line
        # (tensor pipe 94% busy) was told to use ldmatrix/stmatrix and wider shared accesses, which it has none of.
        full = tensor_pct is not None and tensor_pct >= TENSOR_FULL_PCT
        return stall["at_wgmma_full" if full else "at_wgmma_mio"]
    if ("HGMMA" in ops or "WARPGROUP" in ops) and reason in ("gmma", "wait", "barrier", "long_scoreboard", "math_pipe_throttle"):
        return stall["at_wgmma"]
    if ops and set(ops) <= INTEGER_OPS and reason in ("short_scoreboard", "wait"):
        return stall["at_integer"]  # nothing here loads or shuffles: the line waits on others' operands
    if tr.tma_ring and f"{reason}_ring" in stall:
        return stall[f"{reason}_ring"]
    return stall.get(reason, "")


def _line_items(k: KernelProfile, tr: Traits, compile_result: CompileResult | None, now_us: float | None,
                limit: int = 3) -> list[tuple[float, str]]:
    t = template()["other"]
    by_line = compile_result.sass_by_line if compile_result is not None else {}
    items = []
    first_with: dict[str, int] = {}  # advice -> the hotter line it was given for
    for h in k.hot_lines[:limit]:
        reason = h.dominant
        if h.share_pct < 10 or not reason or reason in ("selected", "not_selected"):
            continue
        advice = _advice(reason, tr, by_line.get(h.line), k.tensor_pipe_pct)
        at_rate = advice == template()["stall"]["at_wgmma_full"]
        # the same sentence for a second line is a pointer to the first (the attention forward's wgmma lines carried
        # the same 200 characters twice, in a budget that then dropped a finding)
        if advice and advice in first_with:
            advice = t["same_advice"].format(line=first_with[advice])
        elif advice:
            first_with[advice] = h.line
        worth = h.share_pct / 100 * now_us if now_us else h.share_pct
        if at_rate:  # the wait of a saturated tensor pipe: what a change there can take is the pipe's idle share
            worth *= 1 - (k.tensor_pipe_pct or 0) / 100
        items.append((worth, t["hot_line"].format(line=h.line, text=h.text, share=h.share_pct, reason=reason, advice=advice)))
    return items


def busiest_memory(k: KernelProfile) -> tuple[str, float]:
    """The memory unit with the highest speed-of-light share (`k`: a KernelProfile, or the tuner's Evidence, which
    carries the same figures). ncu's L1/TEX figure counts shared-memory accesses too
    (wgmma operand reads, tile stores): the attention backward's 70% there was shared memory, its DRAM 7% busy."""
    units = {"DRAM": k.dram_sol_pct, "L2": k.l2_sol_pct, "L1/shared memory": k.l1_sol_pct}
    return max(((u, v) for u, v in units.items() if v is not None), key=lambda x: x[1],
               default=("memory", k.memory_sol_pct or 0.0))


def _dram_idle(k: KernelProfile) -> bool:
    """DRAM under DRAM_BUSY_PCT busy: its bytes are not what holds the kernel back."""
    return k.dram_sol_pct is not None and k.dram_sol_pct < DRAM_BUSY_PCT


def _is_occupancy(name: str, message: str) -> bool:
    return "occupancy" in name.lower() or "occupancy" in message.lower()[:200]


def _traffic_worth(launches: list[KernelProfile], min_bytes: float, hbm_gbps: float) -> float:
    """What the DRAM bytes over the minimum can be worth (us): each launch's share of the excess at DRAM bandwidth,
    whole where DRAM limits that launch, else in proportion to how busy its DRAM was. The attention backward's
    excess is mostly its main kernel's, 7% busy, and partly its DRAM-bound pre- and post-passes'."""
    moved = [x for x in launches if x.dram_bytes]
    total = sum(x.dram_bytes for x in moved)
    worth = 0.0
    for x in moved:
        excess_us = x.dram_bytes * (1 - min_bytes / total) / (hbm_gbps * 1e3)  # bytes / (GB/s * 1e3) = us
        limits = x.bottleneck == "memory" and not _dram_idle(x)
        worth += excess_us if limits else excess_us * (x.dram_sol_pct or 0) / 100
    return worth


def _kernel_items(k: KernelProfile, wl: Workload | None, launches: list[KernelProfile], tr: Traits,
                  now_us: float | None, compile_result: CompileResult | None, hbm_gbps: float) -> list[tuple[float, str]]:
    t = template()
    items: list[tuple[float, str]] = _line_items(k, tr, compile_result, now_us)
    by_lines = bool(items)
    total_dram = sum(x.dram_bytes for x in launches if x.dram_bytes)
    if total_dram and wl is not None and wl.min_bytes > 0 and total_dram > 1.5 * wl.min_bytes:
        ratio = total_dram / wl.min_bytes
        worth = _traffic_worth(launches, wl.min_bytes, hbm_gbps)
        key = "traffic_multicast" if "tma_multicast" in tr.has else "traffic"
        if traffic_hidden(k.bottleneck, k.dram_sol_pct):
            key = "traffic_hidden"  # cutting these bytes is the wrong advice: they move under the math
        elif k.bottleneck == "memory" and _dram_idle(k):
            key = "traffic_dram_idle"  # memory-bound by L1 / shared memory or L2: DRAM bytes are not the limit
        items.append((worth, t["other"][key].format(moved=_fmt_bytes(total_dram), minimum=_fmt_bytes(wl.min_bytes),
                                                    ratio=ratio, busy=k.dram_sol_pct or 0, unit=busiest_memory(k)[0],
                                                    who="the longest launch's" if len(launches) > 1 else "its")))
    total = sum(k.stalls.values())
    stall_items = 0
    if total > 0 and not by_lines:
        for reason, value in list(k.stalls.items())[:3]:
            share = 100 * value / total
            advice = _advice(reason, tr)
            if advice and share >= 10 and reason not in ("not_selected", "selected"):
                worth = share / 100 * now_us if now_us else share
                items.append((worth, f"{share:.0f}% of warp stall cycles are '{reason}': {advice}"))
                stall_items += 1
    th, ach = k.theoretical_occupancy_pct, k.achieved_occupancy_pct
    if th is not None and ach is not None and k.occupancy_limiter and not tr.warp_specialised:
        gap = (th - ach) / th if th else 0.0
        if ach < 0.6 * th and th > 0:
            advice = t["other"]["occupancy_imbalance"]
            items.append((gap * (now_us or 100) * 0.5, t["other"]["occupancy"].format(achieved=ach, theoretical=th,
                                                                                     limiter=k.occupancy_limiter, advice=advice)))
        elif th <= 25 and k.bottleneck == "latency" and "big_registers" not in tr.has:
            advice = t["other"]["occupancy_latency"]
            items.append((0.2 * (now_us or 100), t["other"]["occupancy"].format(achieved=ach, theoretical=th,
                                                                              limiter=k.occupancy_limiter, advice=advice)))
    # a memory-bound kernel's tensor pipe idles for its bytes: feeding the wgmma stream is the memory finding's job
    if k.tensor_pipe_pct is not None and (k.opcodes or {}).get("HGMMA") and k.tensor_pipe_pct < 50 \
            and k.bottleneck != "memory":
        key = ("tensor_idle_consumers" if "consumer_warpgroups" in tr.has else "tensor_idle_ring") if tr.tma_ring \
            else "tensor_idle"
        worth = (1 - k.tensor_pipe_pct / 100) * (now_us or 100) * 0.5
        items.append((worth, t["other"][key].format(pct=k.tensor_pipe_pct)))
    for r in k.rules:
        if r.name == "CPIStall" and (stall_items or by_lines):
            continue  # the stall items above say the same with advice (and where)
        if r.type != "OPT" or not r.speedup_pct:
            continue
        if _is_occupancy(r.name, r.message) and (tr.warp_specialised or "big_registers" in tr.has):
            continue  # few, large CTAs at their register budget by design
        if r.name == "UncoalescedGlobalAccess" and tr.tma_ring and "tma_store" in tr.has:
            continue  # bulk copies move the tiles; the rule has no location to act on
        if r.name == "LaunchConfiguration" and "power_limited" in tr.has and "less than the GPU's" in r.message:
            # more SMs powered lower the clock the power limit sets: the main GEMM on 132 CTAs ran 1.2-1.5% slower
            # than on 128 (bench/results/gemm_sweep.md, ref_132), where this rule promised "up to 3%"
            continue
        if r.name == "HighPipeUtilization" and k.bottleneck == "memory":
            continue  # idle math pipes are what memory-bound means: "up to 92%" from more warps contradicts the headline
        msg = rule_text(r.message, RULE_CHARS)
        worth = r.speedup_pct / 100 * now_us if now_us else r.speedup_pct * 0.8
        grounded = _rule_worth(r.name, r.message, k, hbm_gbps, now_us)
        # ncu's own figure is left out where the rule's counts bound it far lower ("est. gain up to 49%" beside
        # "worth up to ~47.2 us, 2% of the time" on the attention forward's store epilogue)
        key = "rule_grounded" if grounded is not None and grounded < worth else "rule"
        worth = min(worth, grounded) if grounded is not None else worth
        items.append((worth, t["other"][key].format(name=r.name, gain=r.speedup_pct, message=msg)))
    return items


RULE_CHARS = 380
# Sentences of an ncu rule that point at its own interface or manuals (the model has neither), or define a term.
_POINTER = re.compile(r"^(See|Check|Look at|Start by)\b|\bGuide\b|\bis defined as\b|\bsections? for\b")
# Sentences that carry this kernel's numbers or say what to do.
_FACT_OR_ACTION = re.compile(r"\d|\b(Try|Consider|consider|By converting|increase|reduce|avoid|Use|use)\b")
_URL = re.compile(r"\s*\(?https?://[^\s)]*\)?")


def rule_text(message: str, limit: int) -> str:
    """What an ncu rule says about this kernel, in about `limit` characters: its facts and its advice first, without
    links or pointers to ncu's tables. Its first sentences alone were kept before: "A wave of thread blocks is
    defined as ..." for a tail effect of 25%, and the fused-FMA rule's count of instructions without the advice."""
    sentences = [x for x in re.split(r"(?<=\.)\s+", _URL.sub("", message.strip())) if x]
    kept = [x for x in sentences if not _POINTER.search(x)] or sentences[:1]
    if len(" ".join(kept)) <= limit:
        return " ".join(kept)
    chosen: set[int] = set()
    size = 0
    for wanted in (True, False):  # facts and advice, then the rest, each in the message's order
        for i, x in enumerate(kept):
            if bool(_FACT_OR_ACTION.search(x)) == wanted and size + len(x) + 1 <= limit:
                chosen.add(i)
                size += len(x) + 1
    if not chosen:
        return kept[0][:limit].rstrip() + " ..."
    return " ".join(x for i, x in enumerate(kept) if i in chosen)


_EXCESS = re.compile(r"([\d,]+) excessive (sectors|wavefronts) \((\d+(?:\.\d+)?)% of the total")


def _rule_worth(name: str, message: str, k: KernelProfile, hbm_gbps: float, now_us: float | None) -> float | None:
    """What ncu's access-pattern rules can be worth by their own counts (us), or None. ncu's 'est. gain' is the
    excess share of the accesses, not of the kernel's time: the backward's 4-byte epilogue stores (12.6 M excess
    sectors, 400 MB) came out as 'up to 50%', 3.2 ms of 8.4. Excess global sectors cost at most their bytes at DRAM
    bandwidth; excess shared wavefronts at most their share of the L1 pipe's busy time."""
    m = _EXCESS.search(message or "")
    if m is None or not now_us:
        return None
    count, unit, pct = float(m[1].replace(",", "")), m[2], float(m[3])
    if name == "UncoalescedGlobalAccess" and unit == "sectors" and hbm_gbps:
        return count * 32 / (hbm_gbps * 1e3)  # bytes / (GB/s * 1e3) = us
    if name == "UncoalescedSharedAccess" and unit == "wavefronts" and k.l1_sol_pct is not None:
        return pct / 100 * k.l1_sol_pct / 100 * now_us
    return None


def profile_feedback(summary: ProfileSummary, verdicts: dict[str, RuntimeTarget], wl: Workload | None,
                     compile_result: CompileResult | None = None, *, arch: str = DEFAULT_ARCH,
                     token_budget: int = DEFAULT_BUDGET, max_items: int = 6, timing: Timing | None = None) -> str:
    """The feedback text; at most `token_budget` tokens (count_tokens).

    It opens with where the kernel stands (time against the roofline, measured when `timing` came from
    the evaluation, and against the library), then the findings ordered by what each is estimated to be
    worth (stall share x time, excess bytes / bandwidth, ncu's estimated gain x time); the figure each shows is
    capped by the headroom to the roof (none past it). Nothing the kernel already does (Traits) is recommended."""
    if not summary.ok:
        return f"No profile could be taken: {harness_text(summary.error)}."
    k = summary.main_kernel()
    st = standing(summary, wl, timing)
    now = st.now_us
    tr = traits(compile_result, verdicts, k)
    if k is not None and power_clock(summary, k):
        tr.has.add("power_limited")
    launched = {x.name for x in summary.kernels}
    items = [(math.inf, w, text) for w, text in _verdict_items(verdicts, arch) + _spill_items(compile_result, launched)]
    if k is not None:
        hbm = (timing.ceilings.get("hbm_gbps") if timing is not None else None) or _peak(summary.gpu)[1]
        cap = st.headroom_us
        for worth, text in _kernel_items(k, wl, summary.kernels, tr, now, compile_result, hbm):
            # ranked by their own worth; the roof's headroom only bounds the figure shown (capped, every item of a
            # kernel near its roof tied, and past it each read "worth up to ~0 us", though a turn later the GEMM
            # climb gained 8 us more: the measured ceilings are medians). No figure at all where none is left.
            shown = min(worth, cap) if cap is not None else worth
            if now and (cap is None or cap > 0):
                text += " " + template()["other"]["worth"].format(worth=_fmt_us(shown), pct=_fmt_pct(100 * shown / now))
            items.append((0.0, worth, text))
    items.sort(key=lambda x: (-x[0], -x[1]))
    name = short_name(k.name) if k is not None else ""
    where = f"{len(summary.kernels)} launch(es)" + (f", the longest is {name}" if k is not None and len(summary.kernels) > 1 else
                                                    f": {name}" if k is not None else "")
    frame = template()["frame"]
    fill = dict(gpu=summary.gpu or "the GPU", where=where, headline=headline(summary, wl), standing=standing_text(st))
    text = frame.format(**fill, items="")
    if count_tokens(text) > token_budget:
        return _truncate(text, token_budget)
    chosen: list[str] = []
    for *_, item in items[:max_items]:
        if count_tokens(frame.format(**fill, items=_numbered(chosen + [item]))) > token_budget:
            break
        chosen.append(item)
    if not chosen and items:
        # the first finding is cut to the room left rather than dropped: a long headline (the clock sentence) and a
        # small budget left the list's heading with nothing under it
        room = token_budget - count_tokens(frame.format(**fill, items=_numbered([""])))
        first = items[0][-1]
        chosen = [_truncate(first, room - 2)] if room >= 16 else []  # 2: the " ..." it ends with
    if not chosen:
        chosen = ["nothing stands out: the kernel is close to what its bottleneck allows."] if not items else []
    return frame.format(**fill, items=_numbered(chosen)).strip()


def _numbered(items: list[str]) -> str:
    return "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))


def _truncate(text: str, budget: int) -> str:
    while text and count_tokens(text) > budget:
        text = text[: int(len(text) * 0.9)]
    return text.rstrip() + " ..."
