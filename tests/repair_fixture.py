"""The CPU fixture of the repair suite (tests/data/repair_suite): NOT the suite. Its verdicts come from a fake
evaluator (gpu "FIXTURE-no-GPU"), so loader, CLI, bench track and export are tested without a GPU.
Regenerate: python3 tests/repair_fixture.py"""
from __future__ import annotations

from pathlib import Path

from ptxbench.agent.repairs.build import build_suite
from ptxbench.agent.repairs.candidates import from_fault_corpus, from_mutations
from ptxbench.agent.repairs.extra_mutations import EXTRA_MUTATIONS
from ptxbench.tools.results import EvalResult, Fingerprint, Timing, TimingStat

FIXTURE = Path(__file__).resolve().parent / "data" / "repair_suite"
GPU = "FIXTURE-no-GPU"
WL = "smoke_gemm_bf16_m256_n256_k512"
# what the fake "GPU" says about each kernel (the reference passes at 1.1x; the control is accepted)
STATUS = {"trap": "RUNTIME_ERROR", "nan_output": "INCORRECT_NAN", "missing_header": "COMPILE_ERROR",
          "misaligned": "RUNTIME_ERROR", "control_correct": "PASSED"}


class FakeGpu:
    def __init__(self, by_source: dict[str, str], reference: str, speedup: float = 1.1):
        self.by_source, self.reference, self.speedup = by_source, reference, speedup
        self.calls: list[tuple[str, bool]] = []

    def evaluate(self, workload_id, source, options):
        self.calls.append((workload_id, options.time))
        status = "PASSED" if source == self.reference else self.by_source[source]
        timing = None
        if status == "PASSED" and options.time:
            stat = TimingStat(median_ms=1.0 / self.speedup, ci_low_ms=0.9, ci_high_ms=1.0, n=10)
            timing = Timing(candidate=stat, baselines={"cublas": TimingStat(median_ms=1.0, ci_low_ms=1.0, ci_high_ms=1.0, n=10)},
                            primary_baseline="cublas", speedup=self.speedup)
        return EvalResult(workload=workload_id, status=status, message=f"fake verdict {status}", timing=timing,
                          gpu_evaluated=True, fingerprint=Fingerprint(gpu=GPU))

    def close(self):
        """Nothing to release."""


def candidates():
    from ptxbench.agent.models.builtin import reference_source

    faults = [c for c in from_fault_corpus() if c.bug_class in STATUS]
    controls = []
    from ptxbench.workloads.solutions.faults import load_corpus

    _, corpus = load_corpus()
    from ptxbench.agent.repairs.candidates import Candidate

    controls.append(Candidate(WL, "control_correct", "a correct kernel", "fault_corpus", corpus["control_correct"]["source"]))
    muts = from_mutations([WL], [m for m in EXTRA_MUTATIONS if m.name == "missing_header"])
    return faults + muts + controls, reference_source(WL)


def fake_gpu() -> FakeGpu:
    cands, reference = candidates()
    return FakeGpu({c.source: STATUS[c.bug_class] for c in cands}, reference)


def make(out: Path = FIXTURE):
    from ptxbench.agent.repairs.suite import write_suite

    cands, _ = candidates()
    report = build_suite(cands, fake_gpu())
    report.suite.built = "2000-01-01"
    for t in report.suite.tasks:
        t.verdict.date = "2000-01-01"
    write_suite(out, report.suite, report.sources)
    return report


if __name__ == "__main__":
    print(make().suite.model_dump_json(indent=1)[:400])
