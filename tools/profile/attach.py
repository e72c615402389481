"""One call for the evaluator: add the profile, the runtime verdict and the sanitizer to an EvalResult.

    result = attach(result, options, source, compile_result, language)

after the GPU worker's result is in (tools/evaluate.py). Following EvalOptions:
- `profile`: a full Nsight Compute profile -> targets_runtime, profile summary, feedback;
- else `profile_on_pass` and the kernel PASSED: the same full profile (it costs about 7% more than the counters
  alone on the GEMM task, and gives the model feedback on every passing turn);
- `sanitize`: the compute-sanitizer tools -> sanitizer findings (+ their feedback).
A profile or sanitizer that cannot run leaves "unknown" verdicts and a reason, never an exception.
"""
from __future__ import annotations

from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.results import CompileResult, EvalResult


def attach(result: EvalResult, options: EvalOptions, source: str, compile_result: CompileResult, language: str = "ptx",
           *, device: int | None = None) -> EvalResult:
    if not result.gpu_evaluated or compile_result.status != "ok" or not compile_result.cubin_path:
        return result
    wants_verdict = options.profile_on_pass and result.status == "PASSED"
    if options.profile or wants_verdict:
        from .candidate import profile_candidate

        outcome = profile_candidate(result.workload, source, compile_result.cubin_path, arch=options.arch,
                                    compile_result=compile_result, full=True, seed=options.seed or 0,
                                    device=device, timing=result.timing)
        outcome.apply_to(result)
    if options.sanitize:
        from ptxbench.tools.sanitize import sanitize_candidate

        sanitized = sanitize_candidate(result.workload, source, language=language, cubin_path=compile_result.cubin_path,
                                       arch=options.arch, tools=options.sanitize, seed=options.seed or 0, device=device)
        sanitized.apply_to(result)
        if sanitized.error:
            result.message = (result.message + f" (sanitizer: {sanitized.error})").strip()
    return result
