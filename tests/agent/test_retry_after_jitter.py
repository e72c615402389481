"""Calls refused with the same Retry-After came back at the same instant (the wait was the header's value exactly,
whenever it passed the jittered back-off) and met the provider's limit together: the header is a floor, jittered."""
from __future__ import annotations

import types

from tenacity import wait_random

from ptxbench.agent.models.litellm_model import _floor


def test_a_retry_after_is_a_floor_with_a_jitter_above_it():
    state = types.SimpleNamespace(attempt_number=1)
    jitter = wait_random(0, 2.0)
    waits = [_floor(10.0, jitter, state) for _ in range(200)]
    assert all(10.0 <= w <= 12.0 for w in waits)
    assert len({round(w, 6) for w in waits}) > 150  # spread, not one instant
    assert _floor(0.0, jitter, state) == 0.0  # no Retry-After: the back-off alone decides
