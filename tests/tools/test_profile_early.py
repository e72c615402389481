"""A profile started beside the timing (tools/profile/early.py): its start-up overlaps the timing, it takes the
GPU only once the evaluation asks for its level, and any other decision kills it without taking the GPU. The fake
ncu of tests/ncu_fake.py plays ncu and the replay."""
from __future__ import annotations

import os
import time

import pytest

from ptxbench.tools.profile import runner
from ptxbench.tools.profile.early import EarlyChoice, EarlyProfile

from ncu_fake import Recorder, fake_ncu  # noqa: F401 - the fixture
from waits import wait_until


def start_fake(tmp_path):
    return lambda hold: runner.profile_command(["replay"], counters=[], full=False, workdir=tmp_path / "w", hold=hold,
                                               env=dict(os.environ))


def test_the_wanted_level_runs_once_decided_and_its_start_up_overlapped_the_timing(fake_ncu, tmp_path):
    hold = Recorder()
    early = EarlyProfile(start_fake(tmp_path), "verdict", hold=hold, device=0)
    # the candidate's timing: the replay gets ready meanwhile (0.4 s of start-up); a run that waited for the decision
    # to start would never be ready here
    wait_until(lambda: list((tmp_path / "w").rglob("ready")), timeout=10)
    decided = time.time()
    summary, seconds = early.claim("verdict")
    stamps = fake_ncu()
    assert summary.ok, summary.error
    assert stamps["ready"] < decided  # the start-up ran beside the timing ...
    (taken, given), = hold.spans
    assert decided <= taken <= stamps["go"] and given < stamps["exit"]  # ... and the GPU was taken only after it
    assert summary.gpu_wait_s < 0.3  # the wait for the decision is not counted as a wait for the GPU
    assert seconds >= 0.4 + 0.2 + 0.4 and summary.gpu_held_s < 0.5  # from the early start: start-up, replay, report


def test_another_level_kills_the_early_run_without_taking_the_gpu(fake_ncu, tmp_path):
    hold = Recorder()
    early = EarlyProfile(start_fake(tmp_path), "verdict", hold=hold, device=0)
    t0 = time.monotonic()
    assert early.claim("full") is None and time.monotonic() - t0 < 0.1  # the evaluation does not wait for it
    assert early.join(timeout=10)
    assert hold.spans == []
    assert not (tmp_path / "stamps.json").exists()  # killed at its gate: the fake ncu never reached its end


def test_a_drop_before_the_replay_is_ready_kills_it_too(fake_ncu, tmp_path):
    hold = Recorder()
    early = EarlyProfile(start_fake(tmp_path), "full", hold=hold)
    early.drop()  # the kernel failed, or the evaluation raised
    assert early.join(timeout=10) and hold.spans == []
    early.drop()  # idempotent


def test_an_early_choice_keeps_the_level_asked_for_and_kills_the_other_at_its_gate(fake_ncu, tmp_path):
    """The verdict and the full profile started beside one timing (the new-best policy with slots to spare): the
    evaluation asks for the full one, which takes the GPU; the verdict run dies at its gate without it."""
    def start(name):
        return lambda hold: runner.profile_command(["replay"], counters=[], full=False, workdir=tmp_path / name,
                                                   hold=hold, env=dict(os.environ))

    held_verdict, held_full = Recorder(), Recorder()
    choice = EarlyChoice([EarlyProfile(start("v"), "verdict", hold=held_verdict, device=0),
                          EarlyProfile(start("f"), "full", hold=held_full, device=0)])
    assert (choice.level, choice.levels, choice.device) == ("verdict", ["verdict", "full"], 0)
    time.sleep(0.8)  # the timing: both replays get ready meanwhile
    summary, _ = choice.claim("full")
    assert summary.ok, summary.error
    assert choice.join(timeout=10)
    assert held_verdict.spans == [] and len(held_full.spans) == 1


def test_an_early_choice_refuses_runs_on_two_devices_or_twice_one_level(tmp_path):
    runs = [EarlyProfile(lambda hold: None, "verdict", hold=Recorder(), device=0),
            EarlyProfile(lambda hold: None, "full", hold=Recorder(), device=1)]
    with pytest.raises(ValueError):
        EarlyChoice(runs)
    with pytest.raises(ValueError):
        EarlyChoice([runs[0], runs[0]])
    for run in runs:
        run.drop()
