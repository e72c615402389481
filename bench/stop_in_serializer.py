"""How often a Ctrl-C lands inside pydantic's serializer and comes out as its error, with and without the hold.

A stop signal raises wherever the main thread runs Python next. Inside `model_dump_json` that happens when the
serializer calls back into Python (a garbage collection's finalizers, a warning), and pydantic then wraps the
KeyboardInterrupt as PydanticSerializationError: `optimize` crashed (exit status 1) instead of stopping (130), and the
trajectory event being written was lost (tools/held_signals.py). This probe serializes a real `eval_result` event (from
a one-turn `optimize --no-gpu` run in a temporary folder) in a loop while a timer thread sends SIGINT, N times
unheld and N times under `signals_held()`, and counts how each stop came out.

    python3 bench/stop_in_serializer.py [--stops 1000]      (CPU; about 2 x 50 ms x stops)
"""
from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ptxbench.agent.records.rundir import read_events
from ptxbench.tools.held_signals import signals_held


def real_eval_event(folder: Path):
    """The eval_result event of a one-turn `optimize --no-gpu` run of the smoke GEMM."""
    subprocess.run([sys.executable, "-m", "ptxbench.agent", "optimize", "smoke_gemm_bf16_m256_n256_k512", "--no-gpu",
                    "--turns", "1", "--run-dir", str(folder / "run"), "--quiet"], check=True, capture_output=True)
    log = next((folder / "run" / "trajectories").glob("*/trajectory.jsonl"))
    return next(e for e in read_events(log) if e.type == "eval_result")


def count(event, stops: int, held: bool) -> collections.Counter:
    tally: collections.Counter = collections.Counter()
    for i in range(stops):
        timer = threading.Timer(0.001 + (i % 10) * 0.0003, lambda: os.kill(os.getpid(), signal.SIGINT))
        try:
            timer.start()  # inside: a slow thread start can meet its own stop, counted as KeyboardInterrupt
            end = time.monotonic() + 0.05
            while time.monotonic() < end:
                if held:
                    with signals_held():
                        event.model_dump_json()
                else:
                    event.model_dump_json()
            tally["no stop"] += 1
        except KeyboardInterrupt:
            tally["KeyboardInterrupt"] += 1
        except Exception as exc:  # noqa: BLE001 - what the stop came out as is the measurement
            tally[type(exc).__name__] += 1
        timer.join()
    return tally


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stops", type=int, default=1000)
    a = p.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with tempfile.TemporaryDirectory() as tmp:
        event = real_eval_event(Path(tmp))
    size = len(event.model_dump_json())
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < 0.5:
        event.model_dump_json()
        n += 1
    print(f"eval_result event: {size:,} bytes of JSON, {0.5 / n * 1e6:.0f} us a dump")
    for held in (False, True):
        tally = count(event, a.stops, held)
        print(f"{'held  ' if held else 'unheld'}: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
