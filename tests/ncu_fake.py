"""A fake `ncu` for the profiler's tests (test_profile_gate.py, test_profile_early.py): a Python script that plays
both ncu and the replay. It sleeps (start-up), writes `ready`, waits for `go`, sleeps (the replay), writes `done`,
sleeps (the report), and writes the report file; each step's time goes to a log the test reads (`fake_ncu()`
returns it). FAKE_MODE picks a failure: crash_early, never_ready, hang. `Recorder` is a `hold` that records when
the GPU was taken and given back."""
from __future__ import annotations

import json
import stat
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from ptxbench.tools.profile import runner

RAW = Path(__file__).parent / "data" / "ncu" / "gated_live.raw.csv"

FAKE = r'''#!{python}
import json, os, sys, time
from pathlib import Path
args = sys.argv[1:]
if "--version" in args:
    print("Version 2025.3.1.0"); sys.exit(0)
if "--import" in args:
    if "raw" in args: print(Path({raw!r}).read_text())
    sys.exit(0)
mode = os.environ.get("FAKE_MODE", "ok")
stamps = {{"start": time.time(), "tmpdir": os.environ.get("TMPDIR", ""), "args": args}}
log = Path(os.environ["FAKE_LOG"])
def save(): log.write_text(json.dumps(stamps))
folder = Path(args[args.index("--handshake") + 1]) if "--handshake" in args else None
report = args[args.index("-o") + 1] + ".ncu-rep"
time.sleep(0.4)  # ncu + interpreter start-up, imports, cubin load
if mode == "crash_early":
    print("solution refused"); save(); sys.exit(3)
if mode == "never_ready":
    time.sleep(60)
if folder is not None:
    folder.mkdir(parents=True, exist_ok=True)
    stamps["ready"] = time.time(); (folder / "ready").write_text("")  # the stamp first: the harness may act on the file at once
    while not (folder / "go").exists(): time.sleep(0.002)
    stamps["go"] = time.time()
time.sleep(0.2)  # the profiled replay
if mode == "hang":
    time.sleep(60)
if folder is not None:
    stamps["done"] = time.time(); (folder / "done").write_text("")
time.sleep(0.4)  # ncu writes its report
Path(report).write_text("report"); stamps["exit"] = time.time(); save()
'''


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    path = tmp_path / "ncu"
    path.write_text(FAKE.format(python=sys.executable, raw=str(RAW)))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(runner, "find_ncu", lambda: str(path))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "stamps.json"))
    return lambda: json.loads((tmp_path / "stamps.json").read_text())


class Recorder:
    """A `hold` that records when the GPU was taken and given back."""

    def __init__(self, fail: bool = False):
        self.spans: list[list[float]] = []
        self.fail = fail

    @contextmanager
    def __call__(self):
        if self.fail:
            raise RuntimeError("pool closed")
        self.spans.append([time.time(), 0.0])
        try:
            yield 0
        finally:
            self.spans[-1][1] = time.time()
