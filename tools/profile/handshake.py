"""ready / go / done between the evaluator and a replay running under ncu, as files in one folder.

The replay process (replay.py --handshake DIR) starts, imports, parses the plan, creates its CUDA
context and loads the cubin: all of it CPU work or work that runs no kernel. Then it writes `ready`
and waits for `go`. The evaluator takes the GPU (pool.exclusive) only then, writes `go`, and gives
the GPU back when `done` appears or the process ends. So the GPU is held for the inputs, the launch
ncu replays and nothing else: interpreter start-up, imports and the report export run beside other
candidates' timing.

Files rather than pipes: ncu starts the replay itself and does not promise to pass file
descriptors through; a file in a folder both sides name works whatever ncu does. Each marker is
written whole (temp file + rename).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

READY, GO, DONE = "ready", "go", "done"
POLL_S = 0.002
CHILD_WAIT_S = 3600.0  # a replay whose evaluator vanished gives up after this long (the evaluator kills it first)


class Handshake:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def signal(self, name: str, text: str = "") -> None:
        tmp = self.folder / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.folder / name)

    def seen(self, name: str) -> bool:
        return (self.folder / name).exists()

    def text(self, name: str) -> str:
        try:
            return (self.folder / name).read_text()
        except OSError:
            return ""

    def wait(self, name: str, timeout_s: float = CHILD_WAIT_S) -> bool:
        """Block until `name` exists (True) or `timeout_s` passes (False)."""
        deadline = time.monotonic() + timeout_s
        while not self.seen(name):
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True
