"""nvidia-smi busy samples in the background, per GPU, for the throughput and scaling scripts.

    with GpuSampler(period_ms=500) as s:
        ...work...
    s.summary()  -> {gpu index: {"samples", "busy_pct_mean", "busy_share" (samples with utilization > 0)}}

With `extra=("clocks.sm", "power.draw", "temperature.gpu")` each sample also carries those readings
(`s.extra_samples`: (time, gpu, {field: value})), `s.window(t0, t1)` averages them over a span and
`s.spread(t0, t1, fields)` gives their percentiles there.

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
    def __init__(self, period_ms: int = 500, extra: tuple[str, ...] = ()):
        self.period_ms = period_ms
        self.extra = extra
        self.samples: list[tuple[float, int, float]] = []  # (time, gpu index, utilization %)
        self.extra_samples: list[tuple[float, int, dict[str, float]]] = []  # (time, gpu index, {field: value})
        self.error = ""
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            self.error = "nvidia-smi not found"
            return self
        query = ",".join(("index", "utilization.gpu", *self.extra))
        self._proc = subprocess.Popen([smi, f"--query-gpu={query}", "--format=csv,noheader,nounits",
                                       f"-lms={self.period_ms}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self.add_line(line, time.time())

    def add_line(self, line: str, when: float) -> None:
        """One line of nvidia-smi's csv output (index, utilization, then the extra fields)."""
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2 + len(self.extra) or not parts[0].isdigit():
            return
        try:
            gpu, busy = int(parts[0]), float(parts[1])
            extra = {f: float(v) for f, v in zip(self.extra, parts[2:])}
        except ValueError:  # "[N/A]" and the like
            return
        self.samples.append((when, gpu, busy))
        if self.extra:
            self.extra_samples.append((when, gpu, extra))

    def window(self, t0: float, t1: float, gpu: int = 0) -> dict[str, float]:
        """The extra fields' means over samples taken between t0 and t1 (time.time()), with their count."""
        rows = [x for t, g, x in self.extra_samples if g == gpu and t0 <= t <= t1]
        out: dict[str, float] = {"samples": len(rows)}
        for f in self.extra:
            if rows:
                out[f] = round(sum(r[f] for r in rows) / len(rows), 1)
        return out

    def spread(self, t0: float, t1: float, fields: tuple[str, ...], min_power: float = 0.0,
               gpu: int = 0) -> dict:
        """The 10th / 50th / 90th percentiles of `fields` over samples taken between t0 and t1 that drew more than
        `min_power` watts (idle gaps left out; needs "power.draw" among the extra fields when set), with their count."""
        rows = [x for t, g, x in self.extra_samples
                if g == gpu and t0 <= t <= t1 and (not min_power or x.get("power.draw", 0) > min_power)]
        if not rows:
            return {"samples": 0}
        out: dict = {"samples": len(rows)}
        for f in fields:
            v = sorted(r[f] for r in rows)
            out[f] = [v[int(q * (len(v) - 1))] for q in (0.1, 0.5, 0.9)]
        return out

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
