"""No module of the package uses a name it never defines (pyflakes' undefined-name check). Such a name fails only
when its line runs, which for a GPU path (a profiler replay's hold, say) is on the GPU machine, mid-run."""
from __future__ import annotations

from pathlib import Path

from pyflakes import api, messages, reporter

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "tools", "workloads", "bench")


class _Collect(reporter.Reporter):
    def __init__(self):
        self.found: list[str] = []

    def flake(self, message):
        if isinstance(message, (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)):
            self.found.append(str(message))

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")


def test_no_module_uses_an_undefined_name():
    collect = _Collect()
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 50
    for path in files:
        api.checkPath(str(path), collect)
    assert collect.found == []
