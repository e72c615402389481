"""Every prompt test module compiles into a cache of its own (a stale shared entry cannot pass a test here)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PTXBENCH_CACHE", str(tmp_path_factory.mktemp("ptxbench-cache")))
        yield
