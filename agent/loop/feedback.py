"""The feedback the model reads after each evaluation, rendered with prompts/feedback.md.

Concise and actionable, each fact once: the status and its one-paragraph message, compile errors (each
distinct one once, with its lines and the line it points at quoted), the usual causes of a hang or an
unnamed fault, resources, the failing correctness trials, timing against the library, target-instruction
verdicts, the profiler's text, and the progress line (this kernel's time against the fastest passing one
before it). In --no-gpu mode every message says that no GPU ran, and a kernel that only compiled is shown
as COMPILED, never as a pass.
"""
from __future__ import annotations

import math
import re
from string import Template

from ptxbench import prompts
from ptxbench.tools.compile_log import without_host_paths
from ptxbench.tools.gpu.ceilings import IMPLAUSIBLE_SPEEDUP
from ptxbench.tools.gpu.timing import SLOW_FACTOR, SLOW_ITERS
from ptxbench.tools.profile.feedback import HARNESS_TEXT_CHARS, harness_text
from ptxbench.tools.results import FORMAT_ERROR, EvalResult, Timing
from ptxbench.tools.textcap import short_name
from ptxbench.workloads.arch import DEFAULT_ARCH, get_arch

NO_GPU_NOTE = ("NOTE: no GPU ran for this evaluation (--no-gpu mode): only parsing, compilation and the SASS scan "
               "were done, so correctness and speed are unknown.")
MAX_ISSUES = 15
# What each timing flag means for the next revision (the flags themselves come from tools/gpu).
FLAG_MEANINGS = {
    "implausible_speedup": f"over {IMPLAUSIBLE_SPEEDUP:g}x the library: re-check that every output is really computed",
    "above_roofline": "faster than the device's roofline allows (its datasheet peak, or the measured ceilings on a GPU "
                      "the table does not know): the timing cannot be trusted",
    "library_overhead_bound": "the library runs far below the roofline at this size (fixed launch cost), so a "
                              "large speedup here can be honest",
    "slow_candidate": f"over {SLOW_FACTOR:g}x slower than the library, so it was timed with {SLOW_ITERS} calls only",
    "reduced_iterations": "fewer timed calls than a normal evaluation takes (a slow candidate's few calls, or as many as "
                          "the time limit allowed): its interval is wider (n above)",
    "invalid_durations": "some timed calls measured no usable duration (zero, negative or not a number: a clock glitch); "
                         "each such pair of calls was left out (n above counts the pairs kept)",
    "result_cached_across_calls": "a repeat call on the same buffers failed the check, so this timing does not count",
    "rechecked": "the first timing was implausibly fast, so it was timed again with the library first in each pair; "
                 "this second timing stands",
    "host_stalls": "a timed call waited for the host (the harness's side, not the kernel's): its time may be a little "
                   "long",
    "profile_output_wrong": "the profiled call's output was wrong (said above): its target instructions are not credited",
    "profile_slower": "the profiled call's kernels ran far longer than the timed calls (said above): it took another "
                      "path under the profiler, so its target instructions are not credited",
    "profile_faster": "the profiled call's kernels ran far shorter than the timed calls (said above): it took a faster "
                      "path under the profiler than when timed, so its target instructions are not credited",
}
MAX_WARNINGS = 20
MAX_IDLE_KERNELS = 6  # entry points the plan never launches, named in the compile lines
# ptxas warnings that cost most of the speed on Hopper, explained next to their verbatim text.
HOPPER_WARNINGS = {
    "C7515": "ptxas serialised the wgmma instructions: something between them (a register the wgmma reads or "
             "writes used outside the async group, a missing wgmma.fence, non-uniform control flow) forces a wait; "
             "keep the accumulators untouched between wgmma.fence and wgmma.wait_group",
    "C7512": "ptxas serialised every wgmma for want of registers: the accumulators live at once (with the A "
             "fragments a wgmma reads from registers) leave the wgmma pipeline too few; wait for one group "
             "(wgmma.wait_group) before issuing the next product's accumulators, keep fewer live, or raise the "
             "consumers' setmaxnreg",
    "C7508": "setmaxnreg was ignored: the kernel needs __launch_bounds__(threads, 1) (in PTX, .maxntid with "
             ".minnctapersm 1 at the entry; .maxntid alone is not enough) so ptxas knows the block size",
    "C7511": "ptxas serialised the wgmma instructions for want of registers for the wgmma pipeline: a wgmma into "
             "part of a larger accumulator array does that (give each product an array of its own), as do more "
             "accumulators live than the registers hold; check the resource line below",
}
# ptxas reserves every named barrier when a bar.sync / bar.arrive id is a register, not an immediate.
ALL_BARRIERS = 16
BARRIERS_NOTE = ("all 16 named barriers are reserved: a bar.sync / bar.arrive id held in a register does that; "
                 "write ids as immediates (`bar.sync 1, 256;`) unless a runtime id is meant")
# The evaluator's message for a compile-only result, which its heading already says.
COMPILED_MESSAGE = "compiled cleanly; not run on a GPU"
# The heading of a compile-only result: the model must not read a kernel that never ran as correct.
STATUS_HEADINGS = {"COMPILED": "COMPILED (not run on a GPU: correctness and speed unknown)",
                   "TIMING_SUSPECT": "TIMING_SUSPECT (correct when checked, but timed faster than this GPU can go "
                                     "or implausibly faster than the library: not counted as correct)"}


UNDEFINED = re.compile(r'identifier "(\w+)" is undefined')


def _helper_hints(errors) -> list[str]:
    """An undefined identifier that is one of the ptxbench wrapper helpers: its exact declaration and header."""
    undefined = list(dict.fromkeys(m.group(1) for e in errors if (m := UNDEFINED.search(e.message))))
    if not undefined:
        return []
    from ptxbench.prompts.helpers import helpers

    known = {h.name: h for h in helpers()}
    return [f"- `{n}` is declared `{known[n].declaration}` in namespace ptxbench, in `#include <ptxbench/"
            f"{known[n].header}>`: include it and write `using namespace ptxbench;` (or call `ptxbench::{n}`)"
            for n in undefined if n in known]


MAX_LINES_NAMED = 6  # lines named for one error message that recurs


def _error_lines(errors) -> list[str]:
    """Each distinct error message once, with the lines it occurs on, in the compiler's order: thirty lines of the
    same mistake filled the list and pushed every other error out (the first errors shown, the rest unsaid)."""
    grouped: dict[str, list] = {}
    for e in errors:
        grouped.setdefault(e.message, []).append(e)
    out = []
    for message, issues in list(grouped.items())[:MAX_ISSUES]:
        named = list(dict.fromkeys(e.line for e in issues if e.line))
        if not named:
            out.append(f"- {message}")
            continue
        where = ", ".join(str(n) for n in named[:MAX_LINES_NAMED])
        more = f" and {len(named) - MAX_LINES_NAMED} more" if len(named) > MAX_LINES_NAMED else ""
        out.append(f"- line{'s' * (len(named) > 1)} {where}{more}: {message}")
        # the line it points at, as written (the first of them): the model need not count lines to find it
        if text := next((e.text for e in issues if e.line == named[0] and e.text), ""):
            out.append(f"  line {named[0]}: `{text}`" if len(named) > 1 else f"  `{text}`")
    if len(grouped) > MAX_ISSUES:
        out.append(f"- ... and {len(grouped) - MAX_ISSUES} more distinct errors")
    return out


def _compile_lines(result: EvalResult) -> list[str]:
    comp = result.compile
    if comp is None:
        return []
    lines = _error_lines(comp.errors)
    lines += _helper_hints(comp.errors)
    if comp.status == "error" and not comp.errors and comp.log:
        lines.append("```\n" + without_host_paths(comp.log.strip()[-3000:]) + "\n```")  # the toolchain's folders
    if comp.status == "ok":
        lines += [f"- warning, line {w.line}: {w.message}" if w.line else f"- warning: {w.message}"
                  for w in comp.warnings[:MAX_WARNINGS]] or ["- no compiler warnings"]
        lines += [f"  ({code}: {why})" for code, why in HOPPER_WARNINGS.items()
                  if any(code in w.message for w in comp.warnings)]
        if len(comp.warnings) > MAX_WARNINGS:
            lines.append(f"- ... and {len(comp.warnings) - MAX_WARNINGS} more warnings")
    # the kernels the plan launches first, in launch order; entry points it never runs only by name (a module of many
    # entry points would otherwise open with kernels that do not matter)
    launched = [n for n in result.launched if n in comp.kernels] if result.launched else list(comp.kernels)
    for k in (comp.kernels[n] for n in launched):
        spills = (f", SPILLS {k.spill_stores} bytes stored / {k.spill_loads} bytes loaded per thread"  # ptxas counts bytes
                  if (k.spill_stores or k.spill_loads) else "")
        bars = f", {k.barriers} named barrier{'s' * (k.barriers != 1)} reserved" if k.barriers else ""
        lines.append(f"- kernel {short_name(k.name)}: {k.registers} registers, {k.smem_static} B static smem, {k.stack} B stack{bars}{spills}")
        if k.barriers == ALL_BARRIERS:
            lines.append(f"  ({BARRIERS_NOTE})")
    idle = [n for n in comp.kernels if n not in launched]
    if idle:
        shown = ", ".join(short_name(n) for n in idle[:MAX_IDLE_KERNELS]) + (f" and {len(idle) - MAX_IDLE_KERNELS} more" if len(idle) > MAX_IDLE_KERNELS else "")
        lines.append(f"- not launched by the plan: {shown}")
    # a module that did not assemble has no SASS: "ABSENT" would tell the model its kernel lacks the instructions
    for name, t in (comp.targets.items() if comp.status == "ok" else ()):
        where = "in SASS" if t.in_sass else ("in PTX only, not in SASS" if t.in_ptx else "ABSENT")
        lines.append(f"- target {name}: {where}" + (f" ({t.sass_count} instructions)" if t.in_sass else ""))
    return (["Compile:"] + lines) if lines else []


def _correctness_lines(result: EvalResult) -> list[str]:
    failed = [t for t in result.correctness if not t.passed]
    shown = failed[:3] if failed else result.correctness[:1]
    # (a result recorded before the message said "trial" says "run")
    if failed and result.message.startswith(tuple(f"{failed[0].tensor} is wrong in {word} {failed[0].trial}:"
                                                  for word in ("trial", "run"))):
        shown = failed[1:4]  # the message is that trial's line in words: said once
    lines = []
    for t in shown:
        bits = [f"trial {t.trial} {t.tensor}: {'pass' if t.passed else 'FAIL'}"]
        if t.max_abs_err is not None:
            bits.append(f"max abs err {t.max_abs_err:.3g}")
        # the relative Frobenius error, which the rule bounds; the largest element-wise relative error is not shown:
        # over elements whose expected value is near zero it read 9.73e+25 on kernels that passed
        if t.rel_fro_err is not None:
            bits.append(f"relative Frobenius err {t.rel_fro_err:.3g}")
        if t.frac_matched is not None:
            bits.append(f"{matched_percent(t.frac_matched)} elements match")
        if t.n_nan or t.n_inf:
            bits.append(f"{t.n_nan} NaN, {t.n_inf} inf")
        if t.worst_index is not None:
            bits.append(f"worst at {t.worst_index}: got {_value(t.worst_value)}, expected {_value(t.worst_expected)}")
        if t.note:
            bits.append(t.note)
        lines.append("- " + ", ".join(bits))
    return (["Correctness:"] + lines) if lines else []


def matched_percent(frac: float) -> str:
    """The share of matching elements, never rounded up to 100% while one element fails (99.996% read 100.00% on a
    FAIL line) nor down to 0% while one matches."""
    if frac >= 1.0 or frac <= 0.0:
        return f"{100 * max(frac, 0.0):.0f}%"
    for digits in range(2, 7):
        shown = math.floor(100.0 * frac * 10**digits) / 10**digits
        if shown > 0.0:
            return f"{shown:.{digits}f}%"
    return "under 0.000001%"


def _value(x: float | None) -> str:
    """An element's value in six significant digits (a float32's repr gave 17: -0.12752722203731537)."""
    return "None" if x is None else f"{x:.6g}"


def _timing_lines(result: EvalResult) -> list[str]:
    timing = result.timing
    if timing is None:
        return []
    c = timing.candidate
    lines = [f"- yours: {c.median_ms:.4f} ms (95% CI {c.ci_low_ms:.4f}-{c.ci_high_ms:.4f}, n={c.n})"]
    for name, b in timing.baselines.items():
        lines.append(f"- {name}: {b.median_ms:.4f} ms")
    if timing.speedup is not None:
        lines.append(f"- speedup over {timing.primary_baseline or 'the library'}: {timing.speedup:.3f}x")
    if timing.tflops is not None:
        lines.append(f"- {timing.tflops:.0f} TFLOP/s" + (f", {timing.sol_pct:.0f}% of roofline" if timing.sol_pct is not None else ""))
    lines += [f"- flag: {f}" + (f" ({meaning})" if (meaning := flag_meaning(f, timing)) else "") for f in timing.flags]
    return ["Timing:"] + lines


def flag_meaning(flag: str, timing: Timing) -> str:
    """What a timing flag means for the next revision ('' for one unknown here); 'host_stalls' says how many timed
    calls waited for the host, where the record counted them: one call in hundreds moves no median, most of them
    might."""
    if flag == "host_stalls" and timing.host_stalls:
        n = timing.host_stalls
        return (f"{n} of the timed calls (yours and the library's together, two per pair) waited for the host (the "
                f"harness's side, not the kernel's): {'its' if n == 1 else 'their'} time may be a little long")
    if flag == "invalid_durations" and timing.invalid_pairs:
        n = timing.invalid_pairs
        return (f"{n} timed pair{'s' * (n != 1)} measured no usable duration (zero, negative or not a number: a clock "
                f"glitch) and {'was' if n == 1 else 'were'} left out; the figures come from the rest")
    return FLAG_MEANINGS.get(flag, "")


# The usual causes of a failure the GPU names in one word, keyed by the runtime error's code (its first word): the
# driver says "unspecified launch failure" or nothing at all (a hang), which alone points nowhere.
FAILURE_HINTS = {
    "TIMEOUT": "a kernel that never finishes usually waits for something that never happens: an mbarrier wait on the "
               "wrong phase parity, an expect_tx byte count other than the bytes its TMA copies deliver, a bar.sync or "
               "named barrier whose thread count not every thread reaches, or a loop whose bound or step is wrong",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "a load, store or atomic touched memory that no buffer owns: check the address "
                                 "arithmetic (element against byte offsets, a 32-bit index that overflows) and the "
                                 "bounds of the last tile in each dimension",
    "CUDA_ERROR_MISALIGNED_ADDRESS": "an access is not aligned to its width: a vector load or store (.v2, .v4, .b64, "
                                     ".b128) needs an address aligned to its size, in global and in shared memory",
    "CUDA_ERROR_LAUNCH_FAILED": "the driver names no cause; on Hopper it is often a fault of an asynchronous unit (a "
                                "TMA copy or a wgmma whose tensor map, shared-memory address or descriptor does not "
                                "match the layout, an mbarrier used outside its protocol) or a trap",
    "OUT_OF_BOUNDS_WRITE": "stores landed outside the buffers: check the bounds of the stores of the last tile in each "
                           "dimension (a tile that does not divide the size) and the store's index arithmetic",
}


def failure_hint(result: EvalResult) -> str:
    """'Common causes: ...' for a hang or a fault the GPU names in one word, or ''; a hang whose likely cause the
    evaluation already named (the register pool's warning) gets no other."""
    code = result.runtime_error.split(":", 1)[0].split()[0] if result.runtime_error.strip() else ""
    if result.status == "TIMEOUT":
        code = "" if "Likely cause" in result.message else "TIMEOUT"
    elif result.status != "RUNTIME_ERROR":
        code = ""
    return f"Common causes: {FAILURE_HINTS[code]}." if code in FAILURE_HINTS else ""


WORK_UNITS = {"flops": "the workload's FLOPs", "input_bytes": "the bytes of the workload's inputs"}


def _runtime_target_line(name: str, t, arch: str) -> str:
    """A family that ran is said to have run, with the share of the workload's work it did: the raw counters behind
    the verdict (sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum = 1,649,267,441,664, ...) were 600 characters a
    turn the model can do nothing with. Any other verdict keeps its reason: that is what to fix."""
    if t.verdict != "executed":  # an unknown one says why the check could not be made: the profiler's words, bounded
        reason = harness_text(t.reason, 2 * HARNESS_TEXT_CHARS) if t.verdict == "unknown" else t.reason
        return f"- target {name} at runtime: {t.verdict}" + (f" ({reason})" if reason else "")
    share = ""
    if t.work_share is not None:
        try:
            unit = WORK_UNITS.get(get_arch(arch).family(name).work, "")
        except (KeyError, ValueError):
            unit = ""
        share = f" ({t.work_share:.2f}x {unit})" if unit else ""
    return f"- target {name} at runtime: executed{share}"


def _sanitizer_line(finding) -> str:
    """A sanitizer finding, its kind said once (a memcheck report's message opens with it: "Invalid __global__ write
    Invalid __global__ write of size 4 bytes: ...")."""
    if finding.message.startswith(finding.kind):
        return f"- sanitizer {finding.tool}: {finding.message}"
    return f"- sanitizer {finding.tool}: {finding.kind}: {finding.message}"


def _lead(message: str, items: list[str]) -> str:
    """The message without its list of `items` when it ends with them (the list follows, one a line)."""
    joined = "; ".join(items)
    return message[: -len(joined)].strip() if items and message.endswith(joined) else message


def _said_by_compile_lines(result: EvalResult) -> bool:
    """A compile error's message is its errors in one line: the Compile section lists them, with their lines."""
    errors = result.compile.errors if result.compile is not None else []
    if result.status != "COMPILE_ERROR" or not errors:
        return False
    first = f"line {errors[0].line}: {errors[0].message}" if errors[0].line else errors[0].message
    return result.message.strip().startswith(first)


def render_eval(result: EvalResult, turn: int, no_gpu: bool, progress: str = "") -> str:
    body: list[str] = []
    message = _lead(result.message.strip(), result.plan_errors)
    said_by_heading = result.status == "COMPILED" and message.startswith(COMPILED_MESSAGE)
    if message and not _said_by_compile_lines(result) and not said_by_heading:
        body.append(message)
    body += [f"- {e}" for e in result.plan_errors[:MAX_ISSUES]]
    if len(result.plan_errors) > MAX_ISSUES:
        body.append(f"- ... and {len(result.plan_errors) - MAX_ISSUES} more")
    if result.runtime_error and not message:  # the message says it in words otherwise
        body.append(f"Runtime error: {result.runtime_error}")
    if hint := failure_hint(result):
        body.append(hint)
    body += _compile_lines(result) + _correctness_lines(result) + _timing_lines(result)
    arch = result.compile.arch if result.compile is not None else DEFAULT_ARCH
    body += [_runtime_target_line(name, t, arch) for name, t in result.targets_runtime.items()]
    body += [_sanitizer_line(s) for s in result.sanitizer[:MAX_ISSUES]]
    if result.feedback:
        body.append("Profile:\n" + result.feedback.strip())
    speedup = f" (speedup {result.speedup:.3f}x)" if result.speedup is not None else ""
    status = STATUS_HEADINGS.get(result.status, result.status)
    return _fill(turn, status, speedup, no_gpu, "\n".join(body), progress)


def progress_text(best_speedup: float | None, best_ms: float | None, result: EvalResult | None, turns_left: int) -> str:
    """The feedback's last lines: how this turn's kernel compares with the fastest passing one before it (by its own
    time: the speedup also moves with the library's timing, which read 1.117x for a kernel slower than the 1.102x
    one before it), the best speedup so far and the turns left. `best_speedup` and `best_ms` are those of the turns
    before this one."""
    parts = []
    ms = result.kernel_ms if result is not None and result.passed else None
    if ms is not None and best_ms:
        change = 100.0 * (ms - best_ms) / best_ms
        if ms < best_ms:
            parts.append(f"This kernel is your fastest so far: {ms:.4f} ms, {-change:.1f}% faster than your best before "
                         f"({best_ms:.4f} ms).")
        else:
            parts.append(f"This kernel ({ms:.4f} ms) is {change:.1f}% slower than your fastest so far ({best_ms:.4f} ms)"
                         + (", though its speedup is higher: the library timed slower this turn."
                            if best_speedup is not None and (result.speedup or 0.0) > best_speedup else "."))
    best = best_speedup
    if result is not None and result.passed and result.speedup is not None and (best is None or result.speedup > best):
        best = result.speedup
    parts.append(f"Best passing speedup so far: {best:.3f}x." if best is not None else
                 "No passing kernel with a speedup yet.")
    parts.append(f"Turns left: {turns_left}.")
    return " ".join(parts)


def render_format_error(error: str, turn: int, no_gpu: bool, progress: str = "") -> str:
    return _fill(turn, FORMAT_ERROR, "", no_gpu, error, progress)


def _fill(turn: int, status: str, speedup_text: str, no_gpu: bool, body: str, progress: str) -> str:
    text = Template(prompts.load("feedback")).safe_substitute(
        turn=turn, status=status, speedup_text=speedup_text, no_gpu_note=NO_GPU_NOTE if no_gpu else "",
        body=body, progress=progress)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


CUT_NOTES = {
    "length": "Your reply was cut at the output token limit (finish_reason: length): keep reasoning and prose short "
              "so that the whole solution fits.",
    "content_filter": "The provider's content filter withheld your reply, or the rest of it (finish_reason: "
                      "content_filter): what it held did not reach the harness.",
}


def cut_note(reply: dict) -> str:
    """What the model is told when the server cut its reply (finish_reason "length" or "content_filter"): without it
    a cut reply reads as a malformed or empty one, and the model cannot tell what happened to its text."""
    return CUT_NOTES.get(reply.get("finish_reason") or "", "")
