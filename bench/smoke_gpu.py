"""A one-minute check that a GPU machine evaluates end to end: the pool starts (with the measured cluster
capacity), a correct kernel passes with every timed call verified, a cheat is timed honestly, a fault and an
unwritten output get their verdicts. Run on a GPU machine:  python3 bench/smoke_gpu.py
"""
import time
from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.workloads.solutions.faults import load_corpus


def main():
    wl, c = load_corpus()
    t0 = time.time()
    ev = LocalEvaluator()
    print("limits cluster_capacity:", ev.pool.limits.get("cluster_capacity"), flush=True)
    for name, timed in (("control_correct", True), ("cheat_count_keyed", True), ("illegal_address", False), ("noop", False)):
        r = ev.evaluate(wl, c[name]["source"], EvalOptions(timeout_s=5, time=timed, profile_on_pass=False))
        print(name, r.status, r.input_seed, r.speedup, r.timing.verified_calls if r.timing else None, r.runtime_error[:60], flush=True)
    ev.close()
    print("done in", round(time.time() - t0, 1), "s")


if __name__ == '__main__':
    main()
