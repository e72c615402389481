"""One call for the evaluator: add the profile, the runtime verdict and the sanitizer to an EvalResult.

    result = attach(result, options, source, compile_result, language, level="verdict", why="...",
                    device=d, hold=lambda: pool.exclusive(d))

after the GPU worker's result is in (tools/evaluate.py, which picks the level with
EvalOptions.profile_level and the GPU with the pool):
- level `verdict`: one ncu run with the counters the runtime target verdict needs (runner.VERDICT_METRICS
  and the families' counters) -> targets_runtime and the short feedback of brief.py, which says why
  the per-line profile was not taken (`why`);
- level `full`: the sections and the source page -> targets_runtime, profile summary, hot lines,
  ranked feedback;
- `sanitize` in the options: the compute-sanitizer tools -> sanitizer findings (+ their feedback).
With `hold`, ncu's replay holds the GPU only while it replays the launches (gated.py); the sanitizer
is run inside `sanitize_hold()` when given (it holds the GPU for its whole run). A profile or
sanitizer that cannot run leaves "unknown" verdicts and a reason, never an exception.
"""
from __future__ import annotations

from contextlib import nullcontext

from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.results import CompileResult, EvalResult


def _replay_seed(options, result: EvalResult) -> int:
    """The profiled call's inputs: the evaluation's own first set (a fixed seed 0 was inputs no evaluated call had,
    which a kernel could know by their values)."""
    if options.seed is not None:
        return options.seed
    return result.input_seed if result.input_seed is not None else 0


def attach(result: EvalResult, options: EvalOptions, source: str, compile_result: CompileResult, language: str = "ptx",
           *, device: int | None = None, level: str | None = None, why: str = "", hold=None,
           sanitize_hold=None, measured=None, expected: dict | None = None) -> EvalResult:
    """`measured`: (summary, seconds) of the ncu run at `level` already made (early.py), judged here instead of a new run.
    `expected`: the evaluation's verified sketch of the profiled inputs (GpuOutcome.verified_sketch)."""
    if not result.gpu_evaluated or compile_result.status != "ok" or not compile_result.cubin_path:
        return result
    if level is None:
        level, why = options.profile_level(result.passed, result.speedup, result.kernel_ms)
    if level != "none":
        from .candidate import profile_candidate

        outcome = profile_candidate(result.workload, source, compile_result.cubin_path, arch=options.arch,
                                    compile_result=compile_result, full=level == "full", seed=_replay_seed(options, result),
                                    device=device, timing=result.timing, hold=hold, note=why, measured=measured,
                                    expected=expected, dist=options.dist)
        outcome.apply_to(result)
        result.profile_reason = why
    if options.sanitize:
        from ptxbench.tools.sanitize import sanitize_candidate

        with (sanitize_hold() if sanitize_hold is not None else nullcontext(device)) as held:
            sanitized = sanitize_candidate(result.workload, source, language=language,
                                           cubin_path=compile_result.cubin_path, arch=options.arch,
                                           tools=options.sanitize, seed=_replay_seed(options, result), device=held,
                                           dist=options.dist)
        sanitized.apply_to(result)
        if sanitized.error:
            result.message = (result.message + f" (sanitizer: {sanitized.error})").strip()
    return result
