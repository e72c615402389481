"""The pool's record of GPU holds (tools/gpu/timeline.py): what a multi-GPU run's scaling figure is read from.
Synthetic holds for the arithmetic, fake workers for the pool's bookkeeping (no GPU)."""
from __future__ import annotations

import threading
import time

from ptxbench.tools.gpu.timeline import Hold, summarize

from tests.tools.test_gpu_pool import job, make_pool


def test_held_time_is_the_union_of_holds_per_gpu_over_the_window():
    s = summarize([Hold(0, "job", False, 0.0, 0.0, 4.0), Hold(0, "hold", True, 1.0, 2.0, 6.0),  # overlap counted once
                   Hold(1, "job", False, 0.0, 0.0, 5.0), Hold(1, "job", False, 9.0, 9.0, 10.0)])
    assert s["window_s"] == 10.0
    assert s["devices"]["0"] == {"held_s": 6.0, "share": 0.6, "jobs": 1, "holds": 1}
    assert s["devices"]["1"] == {"held_s": 6.0, "share": 0.6, "jobs": 2, "holds": 0}
    assert s["wait_s"]["hold pinned"] == {"n": 1, "total": 1.0, "max": 1.0}
    assert s["held_by_what_s"] == {"-": 14.0}  # unlabelled holds (the pool labels jobs with their workload)


def test_idle_while_a_pinned_replay_waited_counts_the_other_gpus_idle_time_once():
    # GPU 0 busy 0-10; two replays pinned to GPU 0 wait from 2 and 3 until 10 and 12; GPU 1 busy 0-4, then idle
    holds = [Hold(0, "job", False, 0.0, 0.0, 10.0), Hold(0, "hold", True, 2.0, 10.0, 12.0),
             Hold(0, "hold", True, 3.0, 12.0, 13.0), Hold(1, "job", False, 0.0, 0.0, 4.0)]
    # GPU 1 idle during the waits' union 2-12 outside its 0-4 job: 8 s (not 8 + 8); GPU 0 has no pinned wait elsewhere
    assert summarize(holds)["idle_while_pinned_waited_s"] == 8.0
    # a replay pinned to the free GPU loses nothing
    assert summarize([Hold(0, "job", False, 0.0, 0.0, 10.0), Hold(1, "hold", True, 2.0, 2.0, 3.0)])[
        "idle_while_pinned_waited_s"] == 0.0


def test_the_pool_records_each_job_and_exclusive_hold_with_its_gpu():
    pool = make_pool(devices=[0, 1], spares=0).start()
    threads = [threading.Thread(target=lambda: pool.submit(job("ok", 5))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with pool.exclusive(1):
        time.sleep(0.05)
    entries = pool.timeline.entries
    assert sum(h.kind == "job" for h in entries) == 4 and all(h.device in (0, 1) for h in entries)
    assert {h.what for h in entries if h.kind == "job"} == {"ok"}  # the job's workload
    hold = [h for h in entries if h.kind == "hold"]
    # the timeline keeps times to 0.1 ms, so the 50 ms sleep may read up to that (and a float's subtraction) shorter
    assert len(hold) == 1 and hold[0].device == 1 and hold[0].pinned and hold[0].end - hold[0].start >= 0.05 - 2e-4
    assert all(h.asked <= h.start <= h.end for h in entries)
    record = pool.timeline.to_json()
    assert record["summary"]["devices"]["1"]["holds"] == 1 and len(record["entries"]) == 5
    pool.close()
