"""The fault corpus (workloads/solutions/faults): each entry gets its own verdict, and the pool stays healthy."""
from __future__ import annotations

import pytest

from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.solution.parse import parse_solution
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.faults import HERE, load_corpus

WORKLOAD, CORPUS = load_corpus()
STATIC_PLAN_ERRORS = {"too_much_smem", "wrong_args"}  # refused before anything runs


def test_manifest_covers_every_file_and_every_fault_kind():
    files = {p.name for p in HERE.iterdir() if p.suffix in (".cu", ".ptx")}
    assert files == {e["file"] for e in CORPUS.values()}
    wanted = {"trap", "illegal_address", "misaligned", "infinite_loop", "oob_write", "nan_output", "constant_output",
              "zero_output", "noop", "cached_result", "too_much_smem", "wrong_args", "cheat_poison_keyed",
              "cheat_count_keyed", "cheat_scratch_flag", "cheat_input_flag", "cheat_reference_reader",
              "cheat_reference_writer", "cheat_shared_stash", "cheat_local_stash", "cheat_const_counter",
              "cheat_code_patch"}
    assert wanted <= set(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_entry_parses_unless_its_fault_is_in_the_plan(name):
    entry = CORPUS[name]
    result = parse_solution(entry["source"], get_workload(WORKLOAD))
    if name in STATIC_PLAN_ERRORS:
        assert isinstance(result, list) and entry["plan"] in " ".join(i.message for i in result)
    else:
        assert not isinstance(result, list), result


@pytest.mark.parametrize("name", ["wrong_args", "too_much_smem"])
def test_plan_faults_are_plan_errors_without_a_gpu(name):
    r = LocalEvaluator().evaluate(WORKLOAD, CORPUS[name]["source"], EvalOptions(no_gpu=True))
    assert r.status == "PLAN_ERROR" and not r.gpu_evaluated
    assert any(CORPUS[name]["plan"] in e for e in r.plan_errors)


@pytest.mark.parametrize("name", sorted(n for n, e in CORPUS.items() if e.get("status") == "COMPILE_ERROR"))
def test_module_data_cheats_are_refused_when_compiled(name):
    """A cheat that lets a module variable's address out of its bytes never runs (tools/module_data.py): the verdict
    is the compile's, the same with or without a GPU."""
    r = LocalEvaluator().evaluate(WORKLOAD, CORPUS[name]["source"], EvalOptions(no_gpu=True))
    assert r.status == "COMPILE_ERROR" and not r.gpu_evaluated, (r.status, r.message)
    assert any(CORPUS[name]["compile_error"] in e.message for e in r.compile.errors), r.compile.errors


def test_hang_and_cheat_survive_compilation():
    ev = LocalEvaluator()
    loop = ev.evaluate(WORKLOAD, CORPUS["infinite_loop"]["source"], EvalOptions(no_gpu=True))
    assert loop.status == "COMPILED" and not loop.gpu_evaluated
    assert loop.compile.kernels["spin"].sass_opcodes.get("BRA", 0) >= 1
    cheat = ev.evaluate(WORKLOAD, CORPUS["cached_result"]["source"], EvalOptions(no_gpu=True))
    assert cheat.status == "COMPILED" and cheat.compile.kernels["gemm"].sass_opcodes.get("ATOMG", 0) + \
        cheat.compile.kernels["gemm"].sass_opcodes.get("RED", 0) >= 1
    # The stashes: the header and the 16 elements each thread reads, and what it writes, stay in the SASS.
    shared = ev.evaluate(WORKLOAD, CORPUS["cheat_shared_stash"]["source"], EvalOptions(no_gpu=True))
    ops = shared.compile.kernels["gemm"].sass_opcodes
    assert shared.status == "COMPILED" and ops.get("LDS", 0) >= 4 + 16 and ops.get("STS", 0) >= 4 + 16, ops
    local = ev.evaluate(WORKLOAD, CORPUS["cheat_local_stash"]["source"], EvalOptions(no_gpu=True))
    ops = local.compile.kernels["gemm"].sass_opcodes
    assert local.status == "COMPILED" and ops.get("LDL", 0) >= 6 + 16 and ops.get("STL", 0) >= 6 + 16, ops
    # The store into code memory stays a generic store of a function's address (the call is kept, not inlined).
    patch = ev.evaluate(WORKLOAD, CORPUS["cheat_code_patch"]["source"], EvalOptions(no_gpu=True))
    ops = patch.compile.kernels["gemm"].sass_opcodes
    assert patch.status == "COMPILED" and ops.get("LD", 0) >= 1 and ops.get("ST", 0) >= 1 and ops.get("CALL", 0) >= 1, ops


def timed(name: str) -> bool:
    """Entries whose verdict needs the timed calls: the cheats (a cheat acts when timed)."""
    return name.startswith("cheat_") or name == "cached_result"


def check_verdict(name: str, r) -> None:
    entry = CORPUS[name]
    allowed = entry.get("status_any") or [entry["status"]]
    assert r.status in allowed, f"{name}: {r.status}: {r.message} {r.runtime_error}"
    assert "PASSED" in allowed or r.status != "PASSED"
    if "max_speedup" in entry:
        assert r.timing is not None and r.timing.speedup < entry["max_speedup"], (name, r.timing)
        assert r.timing.verified_calls >= 2 * r.timing.input_sets, r.timing
    if "error" in entry:
        assert entry["error"] in r.runtime_error, r.runtime_error
    if "note" in entry:
        assert any(entry["note"] in s.note for s in r.correctness), [s.note for s in r.correctness]
    if "message" in entry:
        assert entry["message"] in r.message, r.message
    if "plan" in entry:
        assert any(entry["plan"] in e for e in r.plan_errors), r.plan_errors
    if "compile_error" in entry:
        assert any(entry["compile_error"] in e.message for e in r.compile.errors), r.compile.errors


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(n for n in CORPUS if n != "control_correct"))
def test_fault_gets_its_verdict_and_the_next_candidate_passes(name):
    from gpu_helpers import shared_evaluator

    ev = shared_evaluator()
    r = ev.evaluate(WORKLOAD, CORPUS[name]["source"], EvalOptions(timeout_s=3, time=timed(name)))
    check_verdict(name, r)
    after = ev.evaluate(WORKLOAD, CORPUS["control_correct"]["source"], EvalOptions(timeout_s=10, time=False))
    check_verdict("control_correct", after)


@pytest.mark.gpu
def test_cheats_gain_nothing_and_every_timed_call_was_verified():
    from gpu_helpers import shared_evaluator

    for name in ("cached_result", "cheat_count_keyed", "cheat_poison_keyed", "cheat_scratch_flag", "cheat_shared_stash",
                 "cheat_local_stash"):
        r = shared_evaluator().evaluate(WORKLOAD, CORPUS[name]["source"], EvalOptions(timeout_s=10))
        check_verdict(name, r)
        assert "implausible_speedup" not in r.timing.flags and "above_roofline" not in r.timing.flags
        assert r.input_seed is not None
