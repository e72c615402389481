"""Fixtures of the tools' tests."""
from __future__ import annotations

import sys
from unittest.mock import MagicMock

import pytest


@pytest.fixture
def runner(monkeypatch):
    """tools/gpu/runner.py with the CUDA bindings stubbed (nothing launches); the GPU modules bound to the stub are
    dropped afterwards, so no later test gets them."""
    before = set(sys.modules)
    for name in ("cuda", "cuda.bindings", "cuda.bindings.driver"):
        if name not in sys.modules:
            monkeypatch.setitem(sys.modules, name, MagicMock())
    import ptxbench.tools.gpu.runner as runner_module

    yield runner_module
    for name in set(sys.modules) - before:
        if name.startswith(("ptxbench.tools.gpu.", "cuda")):
            sys.modules.pop(name, None)
