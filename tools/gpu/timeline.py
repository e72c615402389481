"""When each GPU of the pool was held, and by what: the record that says where a multi-GPU run's time went.

The pool notes every hold of a GPU: a job on its worker (`job`: any free GPU) or an exclusive hold for a profiler
replay or a sanitizer run (`hold`; `pinned` when it had to be one named GPU, as a replay started on that GPU
must). Each entry: device, kind, pinned, when it asked, when it got the GPU, when it gave it back (seconds from the
pool's start), and what it was for (the workload). `summarize` turns them into what a scaling figure needs: per GPU, the time held and its share of the
window; the time waited for a GPU; and the idle time of one GPU while a pinned request waited for another, the
loss that only a machine with several GPUs has.
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

MAX_ENTRIES = 100_000  # about 10 MB of JSON at most: a long bench keeps its first holds and counts the rest


@dataclass(frozen=True)
class Hold:
    device: int
    kind: str       # "job" | "hold"
    pinned: bool    # asked for this device by name
    asked: float    # seconds from the pool's start
    start: float
    end: float
    what: str = ""  # the job's workload, or what the hold was for


class GpuTimeline:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.entries: list[Hold] = []
        self.dropped = 0
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def add(self, device: int, kind: str, pinned: bool, asked: float, start: float, end: float, what: str = "") -> None:
        with self._lock:
            if len(self.entries) >= MAX_ENTRIES:
                self.dropped += 1
                return
            self.entries.append(Hold(device, kind, pinned, round(asked, 4), round(start, 4), round(end, 4), what))

    def to_json(self) -> dict:
        with self._lock:
            return {"entries": [asdict(h) for h in self.entries], "dropped": self.dropped,
                    "summary": summarize(self.entries)}


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _overlap(span: tuple[float, float], busy: list[tuple[float, float]]) -> float:
    a, b = span
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in busy)


def summarize(entries: list[Hold] | list[dict]) -> dict:
    """Per device: held seconds and share of the window (first request to last release); waits; the idle time
    of the other GPUs while a pinned request waited (seconds of one GPU idle, summed over GPUs)."""
    holds = [h if isinstance(h, Hold) else Hold(**h) for h in entries]
    if not holds:
        return {}
    lo, hi = min(h.asked for h in holds), max(h.end for h in holds)
    window = max(hi - lo, 1e-9)
    devices = sorted({h.device for h in holds})
    busy = {d: _union([(h.start, h.end) for h in holds if h.device == d]) for d in devices}
    per_device = {}
    for d in devices:
        held = sum(b - a for a, b in busy[d])
        mine = [h for h in holds if h.device == d]
        per_device[str(d)] = {"held_s": round(held, 2), "share": round(held / window, 3),
                              "jobs": sum(h.kind == "job" for h in mine), "holds": sum(h.kind == "hold" for h in mine)}
    pinned_idle = 0.0
    for d in devices:  # d idle while some request pinned to another GPU waited (each moment counted once per GPU)
        waited = _union([(h.asked, h.start) for h in holds if h.pinned and h.device != d and h.start > h.asked])
        pinned_idle += sum(b - a for a, b in waited) - sum(_overlap(w, busy[d]) for w in waited)
    waits = {k: [h.start - h.asked for h in holds if (h.kind, h.pinned) == k] for k in
             (("job", False), ("hold", True), ("hold", False))}
    by_what: dict[str, float] = {}
    for h in holds:
        by_what[h.what or "-"] = by_what.get(h.what or "-", 0.0) + h.end - h.start
    return {"window_s": round(window, 2), "devices": per_device, "held_by_what_s": {k: round(v, 2) for k, v in by_what.items()},
            "wait_s": {f"{kind}{' pinned' if pinned else ''}": {"n": len(v), "total": round(sum(v), 2),
                                                                "max": round(max(v), 2) if v else 0.0}
                       for (kind, pinned), v in waits.items()},
            "idle_while_pinned_waited_s": round(pinned_idle, 2)}
