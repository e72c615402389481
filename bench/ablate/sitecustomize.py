"""Switches parts of the evaluator's per-call preparation off in a GPU worker, for bench/restore_ablation.py only.

Python imports this module at start-up when its folder is on PYTHONPATH; it does nothing unless PTXBENCH_ABLATE names
parts (comma list): scrub (the shared / local memory scrub), unowned (the clear of unowned device memory),
lib_restore (the library's side of each call's restore: its inputs copied back and its output buffers poisoned); and
one part it switches on: blas_handback (the cuBLAS workspaces handed back to the allocator before each clear of
unowned memory, so the clear covers their 32 MB: bench/results/run18/cublas_handback.patch, measured this way before
it enters the tree). The pool's fork server imports it, so every worker it forks runs with the same parts set. Never
on a scoring path: the CLI does not set PTXBENCH_ABLATE.
"""
import os

_parts = {p for p in os.environ.get("PTXBENCH_ABLATE", "").split(",") if p}
if _parts:
    from ptxbench.tools.gpu import calls, runner, scrub

    if "scrub" in _parts:
        scrub.OnChipScrub.run = lambda self, stream, frame: None
    if "unowned" in _parts:
        runner.clear_unowned = lambda stream: 0
    if "blas_handback" in _parts:
        import torch

        _clear = runner.clear_unowned

        def clear_with_handback(stream):
            torch._C._cuda_clearCublasWorkspaces()
            return _clear(stream)

        runner.clear_unowned = clear_with_handback
    if "lib_restore" in _parts:
        _restore = calls.CandidateCalls.restore

        def restore(self):
            library, self.library = self.library, []
            try:
                _restore(self)
            finally:
                self.library = library

        calls.CandidateCalls.restore = restore
