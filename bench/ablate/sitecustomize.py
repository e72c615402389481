"""Switches parts of the evaluator's per-call preparation off in a GPU worker, for bench/restore_ablation.py only.

Python imports this module at start-up when its folder is on PYTHONPATH; it does nothing unless PTXBENCH_ABLATE
names parts (comma list): scrub (the shared / local memory scrub), unowned (the clear of unowned device memory),
lib_restore (the library's inputs copied back before each call), blas_handback (the cuBLAS workspaces handed back
before the clear, so it covers them). The pool's fork server imports it, so every
worker it forks runs with the same parts off. Never on a scoring path: the CLI does not set PTXBENCH_ABLATE.
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

        torch._C._cuda_clearCublasWorkspaces = lambda: None  # unowned.clear_unowned looks it up at each call
    if "lib_restore" in _parts:
        _restore = calls.CandidateCalls.restore

        def restore(self):
            library, self.library = self.library, []
            try:
                _restore(self)
            finally:
                self.library = library

        calls.CandidateCalls.restore = restore
