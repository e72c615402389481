"""The repair suite's controls, checked on the CPU: a task's kernel never names its bug or its verdict, the committed
texts are what the builder makes, and only a kernel that fails every time it is evaluated becomes a task (a fake GPU;
no test here runs a kernel)."""
from __future__ import annotations

import re
import shutil

from ptxbench.agent.export.normalize import normalized_kernel
from ptxbench.agent.repairs.build import suite_drift
from ptxbench.agent.repairs.candidates import from_fault_corpus
from ptxbench.agent.repairs.suite import load_suite, replace_solutions
from ptxbench.tools.results import MODEL_FAILURES

# A line comment, or a block comment other than the plan (its TOML comments are the plan's own)
COMMENT = re.compile(r"//[^\n]*|/\*(?!\s*ptxbench).*?\*/", re.S)


def _comments(text: str) -> str:
    return "\n".join(COMMENT.findall(text))


def test_no_committed_task_names_its_bug_or_its_verdict_in_the_kernel_shown_to_the_model():
    """The broken kernel is the model's whole view of the task (prompts/start_from.md): a fault corpus file opened with
    "// Fault: writes NaN everywhere. Expected: INCORRECT_NAN", the task's answer."""
    suite = load_suite()
    for task in suite.tasks:
        text = suite.solution_path(task).read_text(encoding="utf-8")
        comments = _comments(text).lower()
        assert "fault:" not in comments and "expected:" not in comments, task.id
        assert task.bug_class.replace("_", " ") not in comments and task.bug_class not in comments, task.id
        assert not any(status in text for status in MODEL_FAILURES), task.id


def test_fault_corpus_candidates_lose_only_the_comment_that_names_the_fault():
    from ptxbench.workloads.solutions.faults import load_corpus

    _, corpus = load_corpus()
    candidates = from_fault_corpus()
    assert len(candidates) >= 10
    for c in candidates:
        original = corpus[c.bug_class]["source"]
        assert "Fault:" in original  # the corpus keeps its notes: the harness's own tests read them
        assert "Fault:" not in c.source and "Expected:" not in c.source, c.id
        assert normalized_kernel(c.source) == normalized_kernel(original), c.id  # the same code: the verdict stands


def test_the_committed_fault_corpus_tasks_are_the_builders_text():
    """Reproducible from the builder: every fault corpus task is today's candidate byte for byte (its verdict was
    given to the same code, comments aside)."""
    suite = load_suite()
    fault_tasks = {t.id for t in suite.tasks if t.origin == "fault_corpus"}
    drift = suite_drift(suite, from_fault_corpus())
    assert fault_tasks and fault_tasks <= set(drift.same), sorted(fault_tasks - set(drift.same))


def test_a_comment_only_drift_is_renewed_in_place_and_a_code_change_is_listed(tmp_path):
    from ptxbench.agent.repairs.candidates import Candidate

    folder = tmp_path / "suite"
    shutil.copytree(load_suite().folder, folder)
    suite = load_suite(folder)
    fault = next(t for t in suite.tasks if t.origin == "fault_corpus")
    other = next(t for t in suite.tasks if t.origin == "mutation")
    text = suite.solution_path(fault).read_text()
    moved = [Candidate(fault.workload, fault.bug_class, "", "fault_corpus", "// a new note\n" + text),
             Candidate(other.workload, other.bug_class, "", "mutation", suite.solution_path(other).read_text() + "int x;\n")]
    drift = suite_drift(suite, moved)
    assert set(drift.comments_only) == {fault.id} and drift.code_changed == [other.id]
    assert len(drift.no_candidate) == len(suite.tasks) - 2
    replace_solutions(suite, drift.comments_only)
    again = load_suite(folder)  # the recorded sha256 follows the new text (load_suite refuses a mismatch)
    assert again.solution_path(again.task(fault.id)).read_text().startswith("// a new note\n")
    assert again.task(fault.id).verdict == fault.verdict


def test_a_renewed_compile_or_plan_verdict_quotes_the_renewed_lines(tmp_path):
    """A plan error's message names its line: a renewed comment above it moves the line, so the verdict (one the CPU
    gives: no GPU was involved) is given again; a verdict a GPU gave is left as it was."""
    from ptxbench.agent.repairs.build import cpu_verdicts
    from ptxbench.agent.repairs.candidates import Candidate
    from ptxbench.tools.evaluate import LocalEvaluator

    folder = tmp_path / "suite"
    shutil.copytree(load_suite().folder, folder)
    suite = load_suite(folder)
    plan = suite.task("smoke_gemm_bf16_m256_n256_k512__too_much_smem")
    ran = suite.task("smoke_gemm_bf16_m256_n256_k512__trap")
    line = int(re.search(r"line (\d+): smem", plan.verdict.message).group(1))
    moved = {t.id: "// one line more\n" + suite.solution_path(t).read_text() for t in (plan, ran)}
    drift = suite_drift(suite, [Candidate(t.workload, t.bug_class, "", t.origin, moved[t.id]) for t in (plan, ran)])
    assert set(drift.comments_only) == {plan.id, ran.id}
    evaluator = LocalEvaluator()
    try:
        verdicts = cpu_verdicts(suite, drift.comments_only, evaluator)
    finally:
        evaluator.close()
    assert set(verdicts) == {plan.id} and f"line {line + 1}: smem" in verdicts[plan.id].message
    assert verdicts[plan.id].status == "PLAN_ERROR" and not verdicts[plan.id].gpu
    replace_solutions(suite, drift.comments_only, verdicts)
    again = load_suite(folder)
    assert again.task(plan.id).verdict == verdicts[plan.id] and again.task(ran.id).verdict == ran.verdict


class _Flaky:
    """A fake GPU on which one broken kernel fails only on its first evaluation (a race that bit once)."""

    def __init__(self, inner, flaky_source: str):
        self.inner, self.flaky_source, self.seen = inner, flaky_source, 0

    def evaluate(self, workload_id, source, options):
        result = self.inner.evaluate(workload_id, source, options)
        if source == self.flaky_source:
            self.seen += 1
            if self.seen > 1:
                return result.model_copy(update={"status": "PASSED", "message": "passed this time"})
        return result

    def close(self):
        """Nothing to release."""


def test_a_broken_kernel_that_fails_only_sometimes_is_no_task():
    """One failing evaluation made a task: a race that bit once would then credit a model whose irrelevant edit
    passed by luck. With confirm, each rejected candidate is evaluated again and kept only on the same status."""
    from repair_fixture import candidates, fake_gpu
    from ptxbench.agent.repairs.build import build_suite

    cands, _ = candidates()
    trap = next(c for c in cands if c.bug_class == "trap")
    report = build_suite(cands, _Flaky(fake_gpu(), trap.source), confirm=2)
    assert trap.id not in {t.id for t in report.suite.tasks}
    assert report.dropped[trap.id] == "FLAKY (RUNTIME_ERROR, then PASSED)"
    steady = [t for t in report.suite.tasks]
    assert len(steady) == 3 and all(t.verdict.evaluations == 3 for t in steady)


def test_the_lse_units_bug_leaves_no_comment_spelling_out_its_fix():
    """The reference states the conversion in the comment right above the LSE store ("= m ln 2 + ln(l)"): kept beside
    the line that drops ln 2, it was the fix written out in the kernel the model is shown."""
    from ptxbench.agent.repairs.candidates import SUITE_WORKLOADS, from_mutations
    from ptxbench.agent.repairs.extra_mutations import EXTRA_MUTATIONS

    lse = [m for m in EXTRA_MUTATIONS if m.name == "lse_log2_units"]
    made = from_mutations(SUITE_WORKLOADS, lse)
    assert {c.workload for c in made} >= {"mha_fwd_d128", "mha_fwd_d128_causal", "mha_fwd_d64", "mha_fwd_d128_gqa_h32_kv8"}
    for c in made:
        assert "0.6931471805599453f + logf" not in c.source, c.id  # the bug is in
        assert not re.search(r"//[^\n]*\bln 2\b", c.source), c.id  # and no comment names the missing factor
    suite = load_suite()
    committed = [t for t in suite.tasks if t.bug_class == "lse_log2_units"]
    assert len(committed) == 4
    for task in committed:
        assert not re.search(r"//[^\n]*\bln 2\b", suite.solution_path(task).read_text()), task.id


def test_a_suite_cut_by_the_time_limit_says_it_is_partial():
    """The time limit skipped candidates without a word beyond a count, so a slower machine built a smaller suite
    from the same input; the builder now names what was cut and exits non-zero (bench/build_repair_suite.py)."""
    from repair_fixture import candidates, fake_gpu
    from ptxbench.agent.repairs.build import build_suite, incomplete

    cands, _ = candidates()
    ticks = iter(range(0, 1000, 10))
    cut = build_suite(cands, fake_gpu(), max_seconds=25, clock=lambda: next(ticks))
    assert cut.out_of_time and set(cut.out_of_time) <= set(cut.skipped)
    assert "never evaluated" in incomplete(cut) and all(c in incomplete(cut) for c in cut.out_of_time)
    whole = build_suite(cands, fake_gpu())
    assert not whole.out_of_time and incomplete(whole) == ""


def test_each_task_made_from_a_correct_kernel_knows_it_so_a_swap_back_to_it_is_seen():
    """A model that hands in the reference (from memory, or from training pairs whose fix is that very kernel) passes
    every task of its workload without reading the bug: the build records which kernel a task was made from, up to
    comments and spacing, so scoring can tell that swap from a repair."""
    from repair_fixture import candidates, fake_gpu
    from ptxbench.agent.models.builtin import reference_source
    from ptxbench.agent.repairs.build import build_suite

    cands, reference = candidates()
    report = build_suite(cands, fake_gpu())
    made = report.suite.task(f"{cands[0].workload}__missing_header")
    assert made.is_unbroken_kernel("// from memory\n" + reference_source(made.workload)) is True
    assert made.is_unbroken_kernel(report.sources[made.id]) is False
    fault = report.suite.task(f"{cands[0].workload}__trap")  # a corpus file: made from no correct kernel
    assert fault.unbroken_kernel_hash == "" and fault.is_unbroken_kernel(reference) is None
