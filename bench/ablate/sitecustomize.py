"""Switches parts of the evaluator's per-call preparation off in a GPU worker, for bench/restore_ablation.py only.

Python imports this module at start-up when its folder is on PYTHONPATH; it does nothing unless PTXBENCH_ABLATE names
parts (comma list): scrub (the shared / local memory scrub), unowned (the clear of unowned device memory),
lib_restore (the library's side of each call's restore: its inputs copied back and its output buffers poisoned); and
one that is no part of the preparation: plain_heads (the attention forward's inputs drawn without their offset heads,
workloads/inputs.py, in every process that draws them: the workers and the referee alike). The pool's fork server
imports it, so every worker it forks runs with the same parts set. Never on a scoring path: the CLI does not set
PTXBENCH_ABLATE.
"""
import os

_parts = {p for p in os.environ.get("PTXBENCH_ABLATE", "").split(",") if p}
if _parts & {"scrub", "unowned", "lib_restore"}:
    from ptxbench.tools.gpu import calls, runner, scrub

    if "scrub" in _parts:
        scrub.OnChipScrub.run = lambda self, stream, frame: None
    if "unowned" in _parts:
        runner.clear_unowned = lambda stream: 0
    if "lib_restore" in _parts:
        _restore = calls.CandidateCalls.restore

        def restore(self):
            library, self.library = self.library, []
            try:
                _restore(self)
            finally:
                self.library = library

        calls.CandidateCalls.restore = restore
if "plain_heads" in _parts:
    from ptxbench.workloads import inputs

    inputs.OFFSET_HEADS = 0.0  # offset_heads() reads it at each draw: every head plain, as before run 18
