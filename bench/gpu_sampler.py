"""nvidia-smi busy samples in the background, per GPU, for the throughput and scaling scripts.

    with GpuSampler(period_ms=500) as s:
        ...work...
    s.summary()  -> {gpu index: {"samples", "busy_pct_mean", "busy_share" (samples with utilization > 0)}}

`utilization.gpu` is the share of the last sample period in which a kernel ran, so busy_share is the
share of half-second windows with any kernel and busy_pct_mean the mean of the readings. Without
nvidia-smi it records nothing and says so.
"""
from __future__ import annotations

import shutil
import subprocess
import threading
import time


class GpuSampler:
    def __init__(self, period_ms: int = 500):
        self.period_ms = period_ms
        self.samples: list[tuple[float, int, float]] = []  # (time, gpu index, utilization %)
        self.error = ""
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            self.error = "nvidia-smi not found"
            return self
        self._proc = subprocess.Popen([smi, "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits",
                                       f"-lms={self.period_ms}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit():
                try:
                    self.samples.append((time.time(), int(parts[0]), float(parts[1])))
                except ValueError:
                    continue

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def summary(self) -> dict:
        out: dict = {}
        for gpu in sorted({g for _, g, _ in self.samples}):
            vals = [u for _, g, u in self.samples if g == gpu]
            out[str(gpu)] = {"samples": len(vals), "busy_pct_mean": round(sum(vals) / len(vals), 1),
                             "busy_share": round(sum(v > 0 for v in vals) / len(vals), 3)}
        return out or ({"error": self.error} if self.error else {})
