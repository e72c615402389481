"""Identical cubins passing at once share one profile (tools/profile/inflight.py): pure logic, threads only."""
from __future__ import annotations

import threading
import time

from ptxbench.tools.profile.inflight import InFlightProfiles

KEY = ("sha", "gemm", "sm_90a")


def test_the_second_waits_for_the_first_and_reuses_its_profile():
    runs, cache, order = InFlightProfiles(), {}, []
    assert runs.acquire(KEY, "full", lambda: KEY in cache) == (True, True)
    assert runs.running(KEY, "full") and runs.running(KEY, "verdict")

    def second():
        order.append(("second", runs.acquire(KEY, "verdict", lambda: KEY in cache)))

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(0.1)
    assert thread.is_alive()  # waiting: a full profile in flight gives the verdict too
    cache[KEY] = "full"
    order.append("stored")
    runs.release(KEY)
    thread.join(5)
    assert order == ["stored", ("second", (False, False))] and not runs.running(KEY, "verdict")


def test_a_weaker_profile_in_flight_is_not_waited_for():
    runs = InFlightProfiles()
    assert runs.acquire(KEY, "verdict", lambda: False) == (True, True)
    assert not runs.running(KEY, "full")
    start = time.monotonic()
    assert runs.acquire(KEY, "full", lambda: False) == (True, False)  # profiles itself, at once
    assert time.monotonic() - start < 1.0  # not a wait for the verdict run, which never ends here


def test_when_the_run_waited_for_leaves_nothing_the_waiter_profiles_itself():
    runs = InFlightProfiles()
    assert runs.acquire(KEY, "full", lambda: False) == (True, True)
    got = []
    thread = threading.Thread(target=lambda: got.append(runs.acquire(KEY, "full", lambda: False)))
    thread.start()
    time.sleep(0.05)
    runs.release(KEY)  # the first one's profile failed: nothing stored
    thread.join(5)
    assert got == [(True, True)]  # the waiter now owns the key and profiles
    runs.release(KEY)
    assert not runs.running(KEY, "verdict")


def test_a_stuck_run_is_waited_for_only_so_long():
    runs = InFlightProfiles()
    runs.acquire(KEY, "full", lambda: False)
    start = time.monotonic()
    assert runs.acquire(KEY, "full", lambda: False, wait_s=0.1) == (True, False)
    assert 0.1 <= time.monotonic() - start < 1.0
