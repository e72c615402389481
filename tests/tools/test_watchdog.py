"""The watchdog's adaptive limits (tools/gpu/watchdog.py), the runner's phase messages, the pool's TIMEOUT message,
and the evaluator's memory of hung binaries (tools/gpu/hangs.py): all on the CPU, with fake workers and clocks."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
import torch

from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.gpu import pool as pool_module
from ptxbench.tools.gpu import watchdog
from ptxbench.tools.gpu.hangs import HangMemo, job_key
from ptxbench.tools.gpu.messages import GpuJob, GpuOutcome
from ptxbench.tools.gpu.referee import input_digest
from ptxbench.tools.gpu.timing import L2Flush
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig
from ptxbench.tools.gpu.watchdog import (CandidateWatch, call_limit, probe_limit, timing_limit,
                                         workload_roofline_ms)
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.faults import load_corpus

from fake_workers import evaluator
from waits import wait_until

GEMM, BWD = "gemm_bf16_m8192_n7168_k5120", "mha_bwd_d128"
H200 = {"tflops_bf16": 989.0, "hbm_gbps": 4800.0}


# ---- the arithmetic ----
def test_probe_limit_comes_from_the_workload_roofline_with_a_floor_and_the_timeout_as_cap():
    gemm, bwd = get_workload(GEMM), get_workload(BWD)
    g = workload_roofline_ms(gemm.flops, gemm.min_bytes, {}, "NVIDIA H200")  # the datasheet: no ceilings measured yet
    b = workload_roofline_ms(bwd.flops, bwd.min_bytes, H200, "NVIDIA H200")
    assert 0.5 < g < 0.7 and 4.0 < b < 4.3
    lim = probe_limit(g, 60.0)
    assert lim.seconds == watchdog.FLOOR_S and "floor" in lim.why and "roofline" in lim.why
    lim = probe_limit(b, 60.0)  # the attention backward: 2000 x 4.17 ms
    assert lim.seconds == pytest.approx(watchdog.PROBE_ROOFLINE_FACTOR * b / 1000) and "floor" not in lim.why
    assert probe_limit(b, 6.0).seconds == 6.0 and "capped at the 6 s timeout" in probe_limit(b, 6.0).why
    assert probe_limit(g, 3.0).seconds == 3.0 and "3 s timeout asked for" in probe_limit(g, 3.0).why
    assert probe_limit(None, 60.0).seconds == watchdog.FLOOR_S and "no roofline" in probe_limit(None, 60.0).why
    # measured ceilings (below the datasheet) give a longer roofline time than the datasheet's
    assert workload_roofline_ms(bwd.flops, bwd.min_bytes, {"tflops_bf16": 700.0, "hbm_gbps": 4000.0}, "x") > b
    assert workload_roofline_ms(bwd.flops, bwd.min_bytes, {}, "an unknown GPU") is None


def test_later_limits_scale_from_what_the_kernel_showed():
    assert call_limit(0.015, 60.0).seconds == watchdog.FLOOR_S  # the fp32 attention backward: 15 ms a call
    assert call_limit(1.2, 60.0).seconds == pytest.approx(12.0)
    assert call_limit(30.0, 60.0).seconds == 60.0
    slow = timing_limit(60, 30.0, 60.0)  # 10 warm-up + 50 pairs at 30 ms: 1.8 s of work
    assert slow.seconds == pytest.approx(9.0) and "60 paired calls" in slow.why
    assert timing_limit(60, 0.5, 60.0).seconds == watchdog.FLOOR_S
    assert timing_limit(60, 400.0, 60.0).seconds == 60.0  # 24 s of work: 5x would be 120 s, capped


def test_candidate_watch_sends_the_probe_limit_first_then_limits_scaled_from_the_probe():
    sent, now = [], [100.0]
    watch = CandidateWatch(lambda *m: sent.append(m), 60.0, 4.169, clock=lambda: now[0])
    watch.before_checked_call()
    now[0] += 0.8  # the first call (its protocol included) took 0.8 s
    watch.after_checked_call()
    watch.before_checked_call()
    now[0] += 5.0  # a later call never changes the probe
    watch.after_checked_call()
    watch.before_timing("the timing probe", 2, None)
    watch.before_timing("timing: warm-up and trial 1 of 3", 60, 100.0)
    (n1, l1, w1), (n2, l2, w2), (n3, l3, w3), (n4, l4, w4) = sent
    assert (n1, n2, n3, n4) == ("run", "run", "timing", "timing")
    assert l1 == pytest.approx(8.338) and w1.startswith("the first call; its limit: 2000 x")
    assert l2 == pytest.approx(8.0) and w2.startswith("checked call 2; its limit: 10 x the 0.8 s")
    assert l3 == pytest.approx(16.0) and "the timing probe" in w3  # no pair timed yet: 2 pairs of 2 x 0.8 s, x 5
    assert l4 == pytest.approx(30.0) and "60 paired calls at the measured 100 ms a pair" in w4
    assert watch.probe_s == pytest.approx(0.8)


# ---- the runner's phases, with CUDA stubbed out (nothing here launches anything; fixture `runner`: conftest.py) ----
class FakeSet:
    def __init__(self, index: int):
        out = torch.full((4, 4), float(index + 1))
        self.index, self.seed = index, 10 + index
        self.pristine = {"A": torch.ones(4, 4)}
        self.bufs = SimpleNamespace(outputs=["C"], tensors={"C": SimpleNamespace(data=out), "A": SimpleNamespace(data=self.pristine["A"])})


class FakeCalls:
    """The protocol's surface that correctness() and time_candidate() use; each checked call takes `call_s`."""

    def __init__(self, clock: list, call_s: float, sets: int = 3):
        self.clock, self.call_s = clock, call_s
        self.sets = [FakeSet(i) for i in range(sets)]
        self.verified, self.calls, self.key = {}, 0, 1
        self.order = None

    def checked_call(self, k, flush):
        self.clock[0] += self.call_s
        return self.call_s * 1000, "sketch"

    def attach_library(self, entries):
        self.library = entries

    call = prepare = check = library_call = library_prepare = library_check = lambda *a: None


class FakeReferee:
    """Judges every output correct; its draw for every seed is `draw` (what every FakeSet holds), whose digest a
    prepare gives back as the real referee's reply does."""

    def __init__(self):
        self.prepared: list[tuple[str, int]] = []  # (workload, seed) asked ahead, in order
        self.digests: dict[tuple, list] = {}
        self.draw = {"A": torch.ones(4, 4)}

    def judge(self, wid, seed, dist, trial, outputs, inputs):
        return [{"trial": trial, "tensor": "C", "dist": dist, "passed": True}]

    def prepare_async(self, wid, seed, dist):
        self.prepared.append((wid, seed))
        self.digests[(wid, seed, dist)] = input_digest(self.draw)


def test_correctness_gives_the_first_call_the_probe_limit_and_later_calls_ten_times_its_wall_time(runner):
    clock, sent = [0.0], []
    phase = lambda *m: sent.append(m)  # noqa: E731
    watch = CandidateWatch(phase, 60.0, 4.169, clock=lambda: clock[0])
    job = GpuJob(workload=BWD, timeout_s=60.0)
    referee = FakeReferee()
    referee.prepare_async(BWD, 10, "normal")  # set 0's, as evaluate_job asks for it before loading the module
    stats, digests = runner.correctness(FakeCalls(clock, 1.5), referee, get_workload(BWD), job, phase, {}, 0, watch)
    assert len(stats) == 3 and all(s.passed for s in stats) and sorted(digests) == [0, 1, 2]
    # each next set's reference asked for while this one is checked
    assert referee.prepared == [(BWD, 10), (BWD, 11), (BWD, 12)]
    runs = [(limit, why) for name, limit, *why in sent if name == "run"]
    assert [name for name, *_ in sent] == ["run", "check"] * 3
    assert runs[0][0] == pytest.approx(8.338) and runs[1][0] == runs[2][0] == pytest.approx(15.0)
    assert "checked call 3" in runs[2][1][0]


@pytest.mark.parametrize("first_run_s, expect_chunk", [(0.015, watchdog.FLOOR_S), (0.2, 60.0)])
def test_timing_phases_scale_from_the_measured_pair_time_and_end_in_a_harness_phase(runner, monkeypatch, first_run_s,
                                                                                       expect_chunk):
    clock, sent, chunks, flushes = [0.0], [], [], []

    audits = []

    def fake_time_sides(sides, *, flush, warmup=10, iters=50, trials=3, on_trial=None, audit=None, report=None):
        chunks.append((warmup, iters, trials))
        flushes.append(flush)
        if audit is not None:
            audits.append(audit[0])
        for t in range(trials):
            if on_trial:
                on_trial(t)
        return [[first_run_s * 1000] * iters * trials, [50.0] * iters * trials]

    monkeypatch.setattr(runner, "time_sides", fake_time_sides)
    monkeypatch.setattr(runner, "timing_record", lambda *a, **k: {"flags": [], "speedup": 1.0, "speedup_ci": (1, 1)})
    lib = lambda *a, **k: SimpleNamespace(fn=None, stats={"x": 1}, seed=None, inputs={})  # noqa: E731 - untracked inputs
    released = []
    state = SimpleNamespace(baseline=lib, trusted_baseline=lib, measured_stats=lambda *a: {"x": 1},
                            get_ceilings=lambda: H200,
                            limits=SimpleNamespace(name="NVIDIA H200"), release_idle=lambda **k: released.append(k),
                            referee=None, tampered_baselines=lambda **k: [])
    phase = lambda *m: sent.append(m)  # noqa: E731
    watch = CandidateWatch(phase, 60.0, 4.169, clock=lambda: clock[0])
    watch.probe_s = first_run_s + 0.01
    job = GpuJob(workload=BWD, timeout_s=60.0)
    flush = L2Flush(1 << 26, "read")
    calls = FakeCalls(clock, first_run_s)
    record = runner.time_candidate(calls, state, get_workload(BWD), job, phase, first_run_s, flush, watch)
    # every cached library instance but this evaluation's gives up its call (its buffers freed) before the timing
    assert len(released) == 1 and released[0]["keep"] is calls.library
    assert flushes == [flush, flush] and record["l2_flush"] == "read"  # the probe and the timing: one flush, recorded
    names = [m[0] for m in sent]
    assert names == ["prepare", "timing", "timing", "timing", "timing", "check"]  # probe, trial 1 (+ warm-up), 2, 3
    probe, first, second, third = [m for m in sent if m[0] == "timing"]
    assert probe[1] == watchdog.FLOOR_S and "the timing probe" in probe[2]
    assert "warm-up and trial 1 of 3" in first[2] and "trial 2 of 3" in second[2] and "trial 3 of 3" in third[2]
    assert first[1] == pytest.approx(expect_chunk) and all(m[1] <= job.timeout_s for m in sent if m[0] == "timing")
    assert chunks[1] == (10, 50, 3)  # the full timing: the limits fit the kernel, not the other way round
    # the timing (not the probe) is audited once, after a call drawn among all of its calls
    assert len(audits) == 1 and 0 <= audits[0] < 2 * (10 + 50 * 3)
    assert "host_stalls" not in record["flags"] and record["host_stalls"] == 0



def timing_state() -> SimpleNamespace:
    """The worker state time_candidate reads, with a library instance of untracked inputs, on an H200."""
    lib = lambda *a, **k: SimpleNamespace(fn=None, stats={"x": 1}, seed=None, inputs={})  # noqa: E731
    return SimpleNamespace(baseline=lib, trusted_baseline=lib, measured_stats=lambda *a: {"x": 1},
                           get_ceilings=lambda: H200, limits=SimpleNamespace(name="NVIDIA H200"),
                           release_idle=lambda **k: 0)


def test_a_timing_whose_launch_gate_gave_up_says_so(runner, monkeypatch):
    """A gate that waited its limit for the host lets the GPU go on: that call's interval may hold the host's latency,
    so the timing carries `host_stalls`, and how many calls it was: the flag alone read the same for one call of the
    300 as for 200 of them."""
    def fake_time_sides(sides, *, flush, warmup=10, iters=50, trials=3, on_trial=None, audit=None, report=None):
        if report is not None and iters > 2:
            report["gate_stalls"] = 7
        return [[1.0] * iters * trials, [1.0] * iters * trials]

    monkeypatch.setattr(runner, "time_sides", fake_time_sides)
    monkeypatch.setattr(runner, "timing_record", lambda *a, **k: {"flags": [], "speedup": 1.0, "speedup_ci": (1, 1)})
    monkeypatch.setattr(runner, "audit", lambda *a, **k: None)
    state = timing_state()
    watch = CandidateWatch(lambda *m: None, 60.0, 4.169, clock=lambda: 0.0)
    watch.probe_s = 0.01
    record = runner.time_candidate(FakeCalls([0.0], 0.001), state, get_workload(BWD), GpuJob(workload=BWD, timeout_s=60.0),
                                   lambda *m: None, 0.001, L2Flush(1 << 26, "read"), watch)
    assert "host_stalls" in record["flags"] and record["host_stalls"] == 7


def test_the_audit_finds_a_result_kept_in_any_cached_library_instance_and_has_its_own_limit(runner, monkeypatch):
    """A library instance cached for another workload is a live tensor no protocol compare covers while this one is
    evaluated: the audit (once at a random call of the timing, once after) regenerates every cached instance's inputs
    from its seed and fails the evaluation on a difference; mid-timing it runs under a harness phase, then gives the
    timing its limit back."""
    from ptxbench.tools.gpu.cache import ByteLRU
    from ptxbench.tools.gpu.state import BaselineEntry, WorkerState
    from ptxbench.tools.gpu.verdict import Failed
    from ptxbench.workloads.inputs import make_inputs

    other = get_workload("smoke_gemm_bf16_m256_n256_k512")
    cache = ByteLRU(1 << 30)
    for index in range(2):
        inputs = make_inputs(other, 77 + index, "normal", "cpu")
        cache.put(("baseline", other.id, "cublas", "normal", index),
                  BaselineEntry(lambda: None, inputs, {k: v.clone() for k, v in inputs.items()}, seed=77 + index), 1)
    cache.put(("other", "kind"), object(), 1)  # not a library instance: not audited
    state = SimpleNamespace(cache=cache, referee=None)
    state.tampered_baselines = lambda **k: WorkerState.tampered_baselines(state, **k)
    calls = SimpleNamespace(library=[])
    runner.audit(calls, state, get_workload(BWD), "normal")  # nothing changed: passes
    hits_before = cache.hits
    kept = cache.peek(("baseline", other.id, "cublas", "normal", 1))
    kept.inputs["A"][3, 3] = kept.pristine["A"][3, 3] = 12345.0  # a stash written into both copies alike
    with pytest.raises(Failed) as failed:
        runner.audit(calls, state, get_workload(BWD), "normal")
    assert failed.value.runtime_error == "OUT_OF_BOUNDS_WRITE: cached library inputs" and other.id in failed.value.message
    assert cache.hits == hits_before  # the audit reads the cache without reordering it

    # mid-timing: a harness phase for the audit, then a timing limit again
    sent, order = [], []

    def fake_time_sides(sides, *, flush, warmup=10, iters=50, trials=3, on_trial=None, audit=None, report=None):
        if audit is not None and iters > 2:
            order.append(audit[0])
            audit[1]()
        return [[1.0] * iters * trials, [1.0] * iters * trials]

    monkeypatch.setattr(runner, "time_sides", fake_time_sides)
    monkeypatch.setattr(runner, "timing_record", lambda *a, **k: {"flags": [], "speedup": 1.0, "speedup_ci": (1, 1)})
    def fake_audit(*a, **k):
        time.sleep(0.02)  # what checking the cached instances takes
        sent.append(("audit", k.get("pristine", True)))

    monkeypatch.setattr(runner, "audit", fake_audit)
    state = timing_state()
    phase = lambda *m: sent.append(m[:2])  # noqa: E731
    watch = CandidateWatch(phase, 60.0, 4.169, clock=lambda: 0.0)
    watch.probe_s = 0.01
    seconds = {}
    runner.time_candidate(FakeCalls([0.0], 0.001), state, get_workload(BWD), GpuJob(workload=BWD, timeout_s=60.0),
                          phase, 0.001, L2Flush(1 << 26, "read"), watch, seconds)
    assert 0.04 <= seconds["audit"] < 1.0  # the evaluation's phases say what its two audits took, together
    at = next(i for i, m in enumerate(sent) if m == ("audit", True))
    assert sent[at - 1][0] == "check" and sent[at + 1][0] == "timing"  # its own phase, then the timing's limit back
    assert sent[-1] == ("audit", False)  # and once after the timing (the caller's final checks ask the referee)


# ---- the pool: the worker's limit, capped and floored, and named in the TIMEOUT ----
class ScriptWorker:
    """Sends the phase messages of `script` (a list of (phase, limit_s, why) and ('sleep', s) / ('pass',)), then hangs."""

    scripts: dict[str, list] = {}

    def __init__(self, device, config):
        import queue

        self.device, self.hello, self.jobs, self._alive = device, None, 0, True
        self.outbox: queue.Queue = queue.Queue()
        self.outbox.put({"type": "hello", "device_count": 1, "fingerprint": {"gpu": "fake"},
                         "limits": {"sm_count": 132, "name": "fake"}})

    def send(self, msg):
        if msg.get("type") != "evaluate":
            return
        self.jobs += 1
        threading.Thread(target=self._play, args=(msg["id"], ScriptWorker.scripts[msg["workload"]]), daemon=True).start()

    def _play(self, job_id, script):
        for step in script:
            if step[0] == "sleep":
                time.sleep(step[1])
            elif step[0] == "pass":
                self.outbox.put({"type": "result", "id": job_id, "replace": False, "result": {"status": "PASSED"}})
            else:
                self.outbox.put({"type": "phase", "id": job_id, "phase": step[0], "limit_s": step[1], "why": step[2]})

    def recv(self, timeout):
        import queue

        try:
            return self.outbox.get(timeout=timeout)
        except queue.Empty:
            return None

    def alive(self):
        return self._alive

    exitcode = None

    def kill(self):
        self._alive = False

    def stop(self, grace_s=0.0):
        self._alive = False


def test_the_pool_obeys_the_workers_limit_within_the_timeout_and_names_it_in_the_timeout(monkeypatch):
    monkeypatch.setattr(pool_module, "MIN_CANDIDATE_LIMIT_S", 0.2)
    ScriptWorker.scripts = {
        "hang_second_call": [("run", 2.0, "the first call; limit x"), ("sleep", 0.1), ("check", 900.0, ""),
                             ("run", 0.4, "checked call 2; limit 10 x the 0.04 s the first call took")],
        "asks_too_much": [("run", 100.0, "the first call; limit 2000 x the 50 ms roofline time")],
        "asks_too_little": [("run", 0.01, "")],
        "slow_harness": [("prepare", 5.0, ""), ("sleep", 0.8), ("run", 0.3, "the first call"), ("pass",)],
    }
    pool = GpuPool(PoolConfig(devices=[0], spares=1), factory=lambda d, c: ScriptWorker(d, c))
    t0 = time.monotonic()
    r = pool.submit(GpuJob(workload="hang_second_call", timeout_s=60.0))
    assert r.status == "TIMEOUT" and time.monotonic() - t0 < 3
    assert r.message.startswith("the kernel did not finish within 0.4 s (run phase: checked call 2; limit 10 x")
    assert "watchdog" not in r.message and "worker" not in r.message  # the harness's internals: no use to a model
    assert r.runtime_error == "TIMEOUT after 0.4 s (run phase)"
    t0 = time.monotonic()
    r = pool.submit(GpuJob(workload="asks_too_much", timeout_s=0.5))  # timeout_s stays the upper bound
    assert r.status == "TIMEOUT" and "within 0.5 s" in r.message and time.monotonic() - t0 < 3
    assert "within 0.2 s" in pool.submit(GpuJob(workload="asks_too_little", timeout_s=60.0)).message  # the floor
    # the harness's own phases keep their limit, whatever the candidate's timeout
    assert pool.submit(GpuJob(workload="slow_harness", timeout_s=0.5)).status == "PASSED"
    pool.close()


# ---- the evaluator: an identical binary that hung is not run again ----
WORKLOAD, CORPUS = load_corpus()


def test_an_identical_hung_binary_is_not_run_again_and_the_message_names_no_other_turn(monkeypatch):
    """The memo serves every trajectory of the evaluator: a turn number in the reused message could be another
    trajectory's (another model's), so it names none."""
    import ptxbench.tools.evaluate as evaluate_module

    monkeypatch.setattr(evaluate_module, "attach", lambda *a, **k: pytest.fail("a hung kernel is never profiled"))
    ev, workers = evaluator("TIMEOUT")
    source = CORPUS["control_correct"]["source"]
    first = ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, turn=0, profile="full"))
    again = ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, turn=1, profile="full"))
    assert first.status == again.status == "TIMEOUT" and len(workers[0].jobs) == 1
    assert "not profiled: the kernel hung" in first.profile_reason
    assert again.message.startswith("the same binary (identical cubin, launch plan, workload and options) timed out "
                                    "when it was evaluated earlier in this run; not run again") and "within 5 s" in again.message
    assert "turn" not in first.message and "turn" not in again.message
    ev.evaluate(WORKLOAD, source, EvalOptions(trials=2, turn=2))  # other options: another job, run
    later = ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, turn=5, profile_on_pass="none", best_speedup=2.0))
    assert len(workers[0].jobs) == 2 and "earlier in this run" in later.message  # options not reaching the GPU: remembered
    ev.close()


def test_only_timeouts_are_remembered():
    for status in ("RUNTIME_ERROR", "PASSED", "INCORRECT_NUMERICAL"):
        ev, workers = evaluator(status)
        source = CORPUS["control_correct"]["source"]
        for _ in range(2):
            ev.evaluate(WORKLOAD, source, EvalOptions(trials=1, profile_on_pass=False))
        assert len(workers[0].jobs) == 2, status
        ev.close()


def _two_at_once(ev, workers, source: str, options: EvalOptions) -> list:
    """Two threads submit the same kernel; the second only once the first one's job holds its GPU."""
    ev.pool  # started before the threads race
    results = []
    threads = [threading.Thread(target=lambda: results.append(ev.evaluate(WORKLOAD, source, options))) for _ in range(2)]
    threads[0].start()
    wait_until(lambda: any(w.jobs for w in workers), timeout=30)
    threads[1].start()
    for th in threads:
        th.join()
    return results


def test_two_identical_submissions_on_one_gpu_run_once_when_it_hangs():
    ev, workers = evaluator("TIMEOUT", delay_s=0.3)
    results = _two_at_once(ev, workers, CORPUS["control_correct"]["source"], EvalOptions(trials=1, turn=0))
    assert len(workers[0].jobs) == 1 and [r.status for r in results] == ["TIMEOUT", "TIMEOUT"]
    assert sum("not run again" in r.message for r in results) == 1
    ev.close()


def test_two_identical_submissions_with_a_gpu_free_run_side_by_side():
    """A free GPU is not left idle behind an identical job that is young (it most likely passes)."""
    ev, workers = evaluator("PASSED", delay_s=0.4, devices=(0, 1))
    results = _two_at_once(ev, workers, CORPUS["control_correct"]["source"], EvalOptions(trials=1, profile_on_pass=False))
    assert [len(w.jobs) for w in workers] == [1, 1] and [r.status for r in results] == ["PASSED", "PASSED"]
    first, second = sorted(w.spans[0] for w in workers)
    assert second[0] < first[1]  # side by side: the second began before the first ended, not 2 x 0.4 s in turn
    ev.close()


def test_hang_memo_key_and_release():
    job = GpuJob(workload=GEMM, cubin=b"\x7fELF1", plan={"launches": []}, timeout_s=60.0)
    assert job_key(job) == job_key(job.model_copy(update={"id": 7, "ceilings": {"x": 1.0}, "prepare_timeout_s": 5.0}))
    for change in ({"cubin": b"\x7fELF2"}, {"plan": {"launches": [1]}}, {"workload": BWD}, {"seed": 3}, {"time": False}):
        assert job_key(job) != job_key(job.model_copy(update=change))
    memo = HangMemo()
    key = job_key(job)
    assert memo.claim(key) == (None, True)
    assert memo.claim(key, wait_s=0.05) == (None, False)  # still running: after the wait, run it too
    memo.release(key, None)  # the owner raised: nothing remembered
    assert len(memo) == 0 and memo.claim(key) == (None, True)
    memo.release(key, GpuOutcome(status="TIMEOUT", message="m"))
    hang, owner = memo.claim(key)
    assert not owner and hang.outcome.message == "m"


def test_hang_memo_waits_only_when_running_beside_gains_nothing():
    memo = HangMemo()
    assert memo.claim("k") == (None, True)
    start = time.monotonic()
    assert memo.claim("k", wait_s=5.0, gpu_free=lambda: True) == (None, False)  # young, a GPU free: at once
    assert time.monotonic() - start < 1.0  # not the 5 s wait
    for why in ({"gpu_free": lambda: False}, {"gpu_free": lambda: True, "suspect_s": 0.0}):  # no GPU / suspected hang
        start = time.monotonic()
        assert memo.claim("k", wait_s=0.2, **why) == (None, False)
        assert time.monotonic() - start >= 0.2, why
    waiter = []
    thread = threading.Thread(target=lambda: waiter.append(memo.claim("k", wait_s=5.0)))
    thread.start()
    time.sleep(0.05)
    memo.release("k", GpuOutcome(status="TIMEOUT", message="m"))  # the waiter gets the hang at once
    thread.join()
    hang, owner = waiter[0]
    assert not owner and hang.outcome.message == "m"


@pytest.mark.parametrize("replayed", [False, True])
def test_the_new_inputs_check_names_a_replay_only_when_the_output_is_an_earlier_ones(runner, monkeypatch, replayed):
    """A kernel whose output misses the rule on the new inputs is judged as on any set; "replayed" is said only when
    its output is bit-identical to an earlier set's (a cache keyed on pointers), not for a borderline numerical miss."""
    clock, sent = [0.0], []
    calls = FakeCalls(clock, 1.5)
    calls.set_pristine = lambda k, inputs: None
    monkeypatch.setattr(runner, "make_inputs", lambda *a: {})
    earlier = {k: runner.outputs_digest(s) for k, s in enumerate(calls.sets)}
    if not replayed:  # recomputed: a different output, just past the rule
        calls.sets[0].bufs.tensors["C"].data = torch.full((4, 4), 1.001)
    referee = FakeReferee()
    referee.judge = lambda *a: [{"trial": 3, "tensor": "C", "passed": False, "note": "max abs error 0.0311 > 0.029"}]
    watch = CandidateWatch(lambda *m: sent.append(m), 60.0, 4.169, clock=lambda: clock[0])
    job = GpuJob(workload=BWD, timeout_s=60.0)
    stats = runner.new_inputs_check(calls, referee, get_workload(BWD), job, lambda *m: None, 0, watch, earlier)
    assert len(stats) == 1 and not stats[0].passed
    assert ("bit-identical to trial 0" in stats[0].note) == replayed and "0.029" in stats[0].note
    assert "not recomputed" not in stats[0].note


@pytest.mark.parametrize("wid,job_dist,expect", [(BWD, "normal", ["spiky"]), (BWD, "spiky", ["normal"]),
                                                  (GEMM, "normal", []), (GEMM, "spiky", ["normal"])])
def test_the_declared_distributions_get_a_checked_call_each_on_fresh_inputs(runner, monkeypatch, wid, job_dist, expect):
    """After the new-inputs check, set 0 gets fresh inputs of each distribution the workload declares besides the
    evaluation's, drawn from a seed no call used, and the referee judges them under that distribution."""
    clock, drawn, judged = [0.0], [], []
    calls = FakeCalls(clock, 1.5)
    calls.set_pristine = lambda k, inputs: None
    calls.verified = {0: "old", 1: "old"}
    monkeypatch.setattr(runner, "make_inputs", lambda wl, seed, dist, dev: drawn.append((seed, dist)) or {})
    referee = FakeReferee()
    referee.judge = lambda wid_, seed, dist, trial, *a: judged.append((seed, dist, trial)) or [
        {"trial": trial, "tensor": "C", "dist": dist, "passed": True}]
    watch = CandidateWatch(lambda *m: None, 60.0, 4.169, clock=lambda: clock[0])
    job = GpuJob(workload=wid, timeout_s=60.0, dist=job_dist)
    calls.sets[0].seed = 10 + 1000  # as the new-inputs check left it
    stats = runner.declared_dists_check(calls, referee, get_workload(wid), job, lambda *m: None, 0, watch)
    seed = 10 + 2 * 1000
    assert drawn == [(seed, d) for d in expect] and judged == [(seed, d, 4) for d in expect]
    assert [s.trial for s in stats] == [4] * len(expect) and all(s.passed for s in stats)
    assert calls.verified == {0: "sketch" if expect else "old", 1: "old"}  # set 0's record is its latest inputs'


def test_a_kernel_wrong_only_on_the_declared_tails_fails_and_the_note_says_on_which(runner, monkeypatch):
    clock = [0.0]
    calls = FakeCalls(clock, 1.5)
    calls.set_pristine = lambda k, inputs: None
    monkeypatch.setattr(runner, "make_inputs", lambda *a: {})
    referee = FakeReferee()
    referee.judge = lambda wid_, seed, dist, trial, *a: [
        {"trial": trial, "tensor": "dQ", "dist": dist, "passed": dist != "spiky", "note": "max abs error 0.5 > 0.01"}]
    watch = CandidateWatch(lambda *m: None, 60.0, 4.169, clock=lambda: clock[0])
    stats = runner.declared_dists_check(calls, referee, get_workload(BWD), GpuJob(workload=BWD, timeout_s=60.0),
                                        lambda *m: None, 0, watch)
    assert len(stats) == 1 and not stats[0].passed and runner.status_of(stats) == "INCORRECT_NUMERICAL"
    assert stats[0].note == "on 'spiky' inputs, which this workload declares; max abs error 0.5 > 0.01"


@pytest.mark.parametrize("n_sets", [3, 1001, 2001])
def test_the_final_checks_draw_inputs_no_set_had_however_many_sets(runner, monkeypatch, n_sets):
    """--trials has no upper bound: past 1000 sets (CHECK_SEED_OFFSET), set 0's seed + the offset was set 1000's own, so the
    new-inputs check redrew its inputs and an honest kernel's output, bit-identical to set 1000's, read as a replay.
    Up to that many sets the seeds are as before (recorded runs replay with the inputs they had)."""
    clock, drawn = [0.0], []
    calls = FakeCalls(clock, 1.5, sets=n_sets)
    honest = lambda seed, dist: torch.full((4, 4), seed + (0.5 if dist == "spiky" else 0.0))  # noqa: E731
    for s in calls.sets:  # an honest kernel: the output depends on the inputs only
        s.bufs.tensors["C"].data = honest(s.seed, "normal")
    monkeypatch.setattr(runner, "make_inputs", lambda wl, seed, dist, dev: drawn.append((seed, dist)) or
                        {"seed": seed, "dist": dist})
    calls.set_pristine = lambda k, inputs: calls.sets[k].bufs.tensors["C"].__setattr__(
        "data", honest(inputs["seed"], inputs["dist"]))
    referee, wl, job = FakeReferee(), get_workload(BWD), GpuJob(workload=BWD, timeout_s=60.0)
    watch = CandidateWatch(lambda *m: None, 60.0, 4.169, clock=lambda: clock[0])
    earlier = {k: runner.outputs_digest(s) for k, s in enumerate(calls.sets)}
    used = {(s.seed, "normal") for s in calls.sets}
    stats = runner.new_inputs_check(calls, referee, wl, job, lambda *m: None, 0, watch, earlier)
    stats += runner.declared_dists_check(calls, referee, wl, job, lambda *m: None, 0, watch)
    assert all(s.passed for s in stats), [s.note for s in stats]
    assert len(drawn) == 2 and not set(drawn) & used
    if n_sets <= 1000:
        assert drawn == [(10 + 1000, "normal"), (10 + 2000, "spiky")]
    monkeypatch.setattr("secrets.randbelow", lambda n: n - 1)  # the highest base drawn: every seed below 2**31
    assert runner.evaluation_seeds(None, n_sets)[0] + 2 * runner.check_seed_offset(n_sets) < 2**31


def test_the_final_checks_ask_the_referee_for_their_inputs_and_compare_its_draw(runner, monkeypatch):
    """Each final check's inputs are prepared by the referee before the call, as every set's are, and its draw is
    compared with the worker's. The final checks sent no prepare: no digest came back, the comparison was the worker's
    digest with itself, and a referee that drew other inputs read as the kernel's "modified its input(s)" (or, with
    a fake that judges by outputs alone, passed) instead of the harness fault it is."""
    wl, job = get_workload(BWD), GpuJob(workload=BWD, timeout_s=60.0)
    monkeypatch.setattr(runner, "make_inputs", lambda *a: {})

    def final_checks(referee):
        calls = FakeCalls([0.0], 1.5)
        calls.set_pristine = lambda k, inputs: None
        watch = CandidateWatch(lambda *m: None, 60.0, 4.169, clock=lambda: 0.0)
        stats = runner.new_inputs_check(calls, referee, wl, job, lambda *m: None, 0, watch, {})
        return stats + runner.declared_dists_check(calls, referee, wl, job, lambda *m: None, 0, watch)

    referee = FakeReferee()
    stats = final_checks(referee)
    assert [s.dist for s in stats] == ["normal", "spiky"] and all(s.passed for s in stats)
    assert referee.prepared == [(BWD, 10 + 1000), (BWD, 10 + 2000)] and referee.digests == {}  # each draw compared
    other = FakeReferee()
    other.draw = {"A": torch.zeros(4, 4)}  # the referee's inputs from those seeds are not the worker's
    with pytest.raises(runner.RefereeError, match="drew different inputs from seed 1010"):
        final_checks(other)
    unprepared = FakeReferee()
    unprepared.prepare_async = lambda *a: None  # a judged set must come with the referee's draw
    with pytest.raises(runner.RefereeError, match="judged without the referee's prepare"):
        final_checks(unprepared)


def _declared_call_fails(runner, monkeypatch, fail):
    """evaluate_job of the smoke backward on fakes, every call passing but the one on the declared spiky inputs, which
    raises `fail`; returns (outcome, replace, the phases sent)."""
    clock, sent = [0.0], []
    calls = FakeCalls(clock, 0.01)
    dists = []
    monkeypatch.setattr(runner, "make_inputs", lambda wl, seed, dist, dev: dists.append(dist) or {})
    calls.set_pristine = lambda k, inputs: calls.sets[k].bufs.tensors["C"].__setattr__(  # new inputs, a new output
        "data", torch.full((4, 4), 100.0 + len(dists)))

    def checked_call(k, flush):
        if fail is not None and dists and dists[-1] == "spiky":
            raise fail
        return 10.0, "sketch"

    calls.checked_call = checked_call
    referee = FakeReferee()
    referee.changed_inputs = lambda *a: []
    for name, value in (("evaluation_flush", lambda *a: None), ("check_plan", lambda *a: []),
                        ("check_memory", lambda *a, **k: []), ("module_globals", lambda cubin: []),
                        ("Candidate", lambda *a: SimpleNamespace(close=lambda: None, frame=1024)),
                        ("sets_in_memory", lambda *a: calls.sets), ("CandidateCalls", lambda *a: calls),
                        ("driver_error", lambda cand: "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access")):
        monkeypatch.setattr(runner, name, value)
    state = SimpleNamespace(referee=referee, ceilings={}, cache=SimpleNamespace(clear=lambda: None), reserved_frame=1024,
                            limits=SimpleNamespace(name="NVIDIA H200", l2_bytes=60 << 20, sm_count=132,
                                                   max_threads_per_sm=2048))
    job = GpuJob(workload="smoke_mha_bwd_d64", time=False, seed=10,  # the fake sets' seeds: 10, 11, 12
                 plan={"num_sms": 132, "launches": [], "scratch": [], "tmaps": []})
    out, replace = runner.evaluate_job(state, job, lambda *m: sent.append(m))
    return out, replace, sent


@pytest.mark.parametrize("fail", [
    lambda r: r.Failed("RUNTIME_ERROR", "out-of-bounds write: the kernel wrote past dQ",
                       runtime_error="OUT_OF_BOUNDS_WRITE: dQ's guard zone"),
    lambda r: r.Failed("INCORRECT_NUMERICAL", "the kernel modified its input(s): K"),
    lambda r: r.CudaError("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access", "cuEventSynchronize"),
    lambda r: RuntimeError("CUDA error: an illegal memory access was encountered")])
def test_a_kernel_that_breaks_only_on_the_declared_tails_is_told_on_which_inputs(runner, monkeypatch, fail):
    """A fault, a stray write or a hang on the declared distribution's call only: its verdict as on any call, and the
    message (or, for a hang, the phase the pool's TIMEOUT message quotes) says it was on those inputs, which the
    evaluation's own never showed."""
    out, replace, sent = _declared_call_fails(runner, monkeypatch, fail(runner))
    assert out.status in ("RUNTIME_ERROR", "INCORRECT_NUMERICAL") and out.status != "PASSED"
    assert out.message.endswith("(on 'spiky' inputs, which this workload declares)"), out.message
    runs = [why for name, _, *why in sent if name == "run"]
    assert len(runs) == 5 and "'spiky' inputs" in runs[-1][0] and not any("spiky" in w[0] for w in runs[:-1])
    passing, _, _ = _declared_call_fails(runner, monkeypatch, None)  # nothing raised: the message is untouched
    assert passing.status == "PASSED" and not passing.message


def test_a_suspect_timing_says_which_check_it_failed(runner):
    """TIMING_SUSPECT's message names its reason: above the roofline the GPU cannot do the work that fast; an
    implausible speedup alone can also be a library that read slow in that evaluation (on the H200 cuBLAS once timed
    the M = 128 decode GEMM at 0.107 ms against its usual 0.031 beside an honest kernel at 59% of the roofline:
    bench/results/reference_eval.md), so the message gives both times and asks for another evaluation."""
    from ptxbench.tools.results import Timing, TimingStat

    def stat(ms):
        return TimingStat(median_ms=ms, ci_low_ms=ms, ci_high_ms=ms, n=100)

    slow_library = Timing(candidate=stat(0.0303), baselines={"cublas": stat(0.1072)}, primary_baseline="cublas",
                          speedup=3.543, sol_pct=59.0, flags=["implausible_speedup"], recheck_speedup=3.643)
    msg = runner.suspect_message(slow_library)
    assert "cublas 0.1072 ms against the kernel's 0.0303" in msg and "evaluate it again" in msg
    assert "faster than this GPU can compute" not in msg and msg.endswith("not counted as correct")
    too_fast = slow_library.model_copy(update={"flags": ["implausible_speedup", "above_roofline"], "sol_pct": 140.0})
    msg = runner.suspect_message(too_fast)
    assert "faster than this GPU can compute the workload" in msg and "140% of the measured roofline" in msg
