"""Shared pieces of the agent tests: solution replies, the scripted server's model string, a run helper."""
from __future__ import annotations

from pathlib import Path

from ptxbench.agent.records.rundir import load_run

DATA = Path(__file__).resolve().parent / "data" / "agent"
WORKLOAD = "smoke_gemm_bf16_m256_n256_k512"
GOOD_PTX = (DATA / "good.ptx").read_text()
# A typo'd register: ptxas rejects the line with "Unknown symbol '%rs9'".
BROKEN_PTX = GOOD_PTX.replace("    ret;\n", "    mov.b32 %r2, %rs9;\n    ret;\n")


def reply(source: str, note: str = "Here is my kernel.") -> dict:
    return {"content": f"{note}\n\n```ptx\n{source}```\n"}


def events(run_dir: Path) -> list:
    (record,) = load_run(run_dir)
    return record.events


def of_type(evs: list, kind: str) -> list:
    return [e for e in evs if e.type == kind]


def request_text(body: dict) -> str:
    return "\n".join(str(m.get("content") or "") for m in body["messages"])


class StubEvaluator:
    """Answers without compiling: PASSED with the given speedups in turn, for tests of the loop's logic."""

    def __init__(self, speedups: list[float | None]):
        self.speedups = list(speedups)
        self.sources: list[str] = []

    def evaluate(self, workload_id, source, options):
        from ptxbench.tools.results import EvalResult, Timing, TimingStat

        self.sources.append(source)
        speedup = self.speedups.pop(0) if self.speedups else None
        if speedup is None:
            return EvalResult(workload=workload_id, status="COMPILE_ERROR", message="ptxas: too much shared memory")
        stat = TimingStat(median_ms=1.0 / speedup, ci_low_ms=1.0 / speedup, ci_high_ms=1.0 / speedup, n=10)
        base = TimingStat(median_ms=1.0, ci_low_ms=1.0, ci_high_ms=1.0, n=10)
        timing = Timing(candidate=stat, baselines={"cublas": base}, primary_baseline="cublas", speedup=speedup)
        return EvalResult(workload=workload_id, status="PASSED", message="correct", timing=timing, gpu_evaluated=True)

    def close(self):
        """Nothing to release: a stand-in holds no process or GPU."""


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                   "no_proxy")


def offline_without_proxies(monkeypatch) -> None:
    """No proxy variable of this machine's, and a key for the openai/ models the offline tests point at dead hosts
    (a proxy set here would change which host a test's connection fails on)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test-0000")
