"""Nsight Compute profiling of one candidate: the runtime target-instruction verdict and feedback.

    profile_candidate(workload_id, source, cubin_path, ...) -> ProfileOutcome   (candidate.py)
    attach(result, options, source, compile_result, language) -> EvalResult  (attach.py: what the
        evaluator calls after the GPU worker: profile / runtime verdict on pass / sanitizer per EvalOptions)
Modules: replay.py (the program ncu runs), runner.py (the ncu command and its failure handling),
ncu_csv.py (CSV pages), summary.py (ProfileSummary), verdict.py (executed / present_not_executed /
absent / unknown), feedback.py (ranked, token-bounded text), lineinfo.py (`.loc` for PTX lines).
"""
from .attach import attach
from .candidate import ProfileOutcome, profile_candidate
from .summary import KernelProfile, ProfileSummary

__all__ = ["attach", "ProfileOutcome", "profile_candidate", "ProfileSummary", "KernelProfile"]
