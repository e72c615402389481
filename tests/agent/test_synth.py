"""Bug injection on the CPU: the mutations change the reference GEMM as intended, and the synth pipeline
records only rejected variants, which export as Fixit rows. (The real GPU evaluation is in test_synth_gpu.)"""
from __future__ import annotations

from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
from ptxbench.agent.export.mutations import BY_NAME, applicable
from ptxbench.agent.export.synth import synthesize
from ptxbench.tools.results import CompileResult, EvalResult
from ptxbench.workloads.solutions.gemm_template import default_params, render

GEMM = "gemm_bf16_m8192_n7168_k5120"


def test_mutations_apply_to_the_reference_gemm():
    source = render(default_params())
    found = {m.name: broken for m, broken in applicable(source)}
    assert {"missing_wgmma_fence", "wait_group_too_little", "wrong_desc_k_step", "wrong_swizzle",
            "mbarrier_phase_error", "off_by_one_k_tiles", "accumulator_not_zeroed"} <= set(found)
    assert "wgmma_wait<1>();" in found["wait_group_too_little"] and found["wait_group_too_little"].count("wgmma_wait<0>();") \
        == source.count("wgmma_wait<0>();") - 1
    assert 'swizzle = "64B"' in found["wrong_swizzle"]
    assert "mbar_wait(&full[stage], phase ^ 1)" in found["mbarrier_phase_error"]


def test_raw_ptx_spellings_are_mutated_too():
    ptx = "  wgmma.fence.sync.aligned;\n  wgmma.wait_group.sync.aligned 0;\n  fence.proxy.async.shared::cta;\n"
    assert BY_NAME["missing_wgmma_fence"].apply(ptx) == "  wgmma.wait_group.sync.aligned 0;\n  fence.proxy.async.shared::cta;\n"
    assert "aligned 1;" in BY_NAME["wait_group_too_little"].apply(ptx)
    assert "fence.proxy" not in BY_NAME["missing_fence_proxy_async"].apply(ptx)


class ScriptedEvaluator:
    """Answers by which bug a source carries: stands in for the GPU to test the recording logic only."""

    def __init__(self, reference: str):
        self.reference = reference
        self.calls = 0

    def evaluate(self, workload_id, source, options):
        self.calls += 1
        if source == self.reference:
            status = "PASSED"
        elif "mbar_wait(&full[stage], phase ^ 1)" in source:
            status = "TIMEOUT"
        elif "/ BK - 1;" in source:
            status = "INCORRECT_NUMERICAL"
        else:
            status = "PASSED"  # e.g. the missing fence: a variant the evaluator accepts must not become a row
        return EvalResult(workload=workload_id, status=status, message=f"verdict {status}",
                          compile=CompileResult(status="ok", arch="sm_90a"), gpu_evaluated=True)

    def close(self):
        """Nothing to release: a stand-in holds no process or GPU."""


def test_synthesize_keeps_only_rejected_variants_and_exports_fixit_rows(tmp_path):
    source = render(default_params())
    ev = ScriptedEvaluator(source)
    names = ["missing_wgmma_fence", "mbarrier_phase_error", "off_by_one_k_tiles"]
    report = synthesize([GEMM], ev, tmp_path / "run", sources=lambda w: source, prompts=lambda w: ("SYS", "TASK"),
                        feedback=lambda r, t: f"log: {r.status}", mutations=names)
    assert ev.calls == 4 and report.reference_status[GEMM] == "PASSED"
    by = {o.mutation: o for o in report.outcomes}
    assert not by["missing_wgmma_fence"].kept and by["missing_wgmma_fence"].status == "PASSED"
    assert by["mbarrier_phase_error"].kept and by["mbarrier_phase_error"].as_expected
    assert by["off_by_one_k_tiles"].kept and by["off_by_one_k_tiles"].status == "INCORRECT_NUMERICAL"

    cfg = ExportConfig(recipe="fixit", require_target_executed=False)
    rows, _ = build_rows(collect_samples([tmp_path / "run"]), cfg)
    assert sorted(r.provenance.synthetic for r in rows) == ["mbarrier_phase_error", "off_by_one_k_tiles"]
    row = next(r for r in rows if r.provenance.synthetic == "mbarrier_phase_error")
    assert row.prompt[0].content == "SYS" and row.prompt[1].content == "TASK"
    assert row.prompt[3].content == "log: TIMEOUT" and row.failure_class == "TIMEOUT"
    assert "mbar_wait(&full[stage], phase ^ 1)" in row.prompt[2].content
    assert "mbar_wait(&full[stage], phase ^ 1)" not in row.completion[0].content


def test_attention_mutations_touch_only_the_plan_flags():
    from ptxbench.workloads.registry import get_workload
    from ptxbench.workloads.solutions.attention import attention_solution

    causal = attention_solution(get_workload("mha_fwd_d128_causal"))
    found = {m.name: broken for m, broken in applicable(causal)}
    assert set(found) == {"wrong_softmax_scale", "missing_causal_mask"}
    assert '"f32:scale * scale", "i32:1"]' in found["wrong_softmax_scale"]
    assert found["missing_causal_mask"].replace('"i32:0"]', '"i32:1"]') == causal
    assert "missing_causal_mask" not in {m.name for m, _ in applicable(attention_solution(get_workload("mha_fwd_d128")))}


def test_the_causal_mask_class_reaches_the_wgmma_causal_forwards():
    """missing_causal_mask matched only the plain kernels' plan flag: the references synth-repairs mutates (the wgmma
    forwards, whose causality is compiled in) never had it. There it turns CAUSAL off, one line, and still builds."""
    from ptxbench.agent.models.builtin import reference_source
    from ptxbench.tools.compile import compile_source

    for wid in ("mha_fwd_d128_causal", "mha_fwd_d64_causal"):
        source = reference_source(wid)
        found = {m.name: broken for m, broken in applicable(source)}
        assert "missing_causal_mask" in found, wid
        changed = [(a, b) for a, b in zip(source.splitlines(), found["missing_causal_mask"].splitlines()) if a != b]
        assert changed == [("constexpr bool CAUSAL = true;", "constexpr bool CAUSAL = false;")]
    assert "missing_causal_mask" not in {m.name for m, _ in applicable(reference_source("mha_fwd_d128"))}
    r = compile_source(found["missing_causal_mask"], "cuda", "sm_90a", "mha_fwd_d64_causal")
    assert r.status == "ok", r.errors


def test_wgmma_attention_mutations_change_exactly_their_lines():
    from pathlib import Path

    from ptxbench.tools.compile import compile_source

    source = (Path(__file__).resolve().parents[2] / "workloads" / "solutions" / "attention_fwd_wgmma.cu").read_text()
    found = {m.name: broken for m, broken in applicable(source)}
    assert {"pv_operand_not_transposed", "softmax_max_not_reduced", "row_sum_not_reduced", "missing_wgmma_fence",
            "wrong_softmax_scale"} <= set(found)
    pv = found["pv_operand_not_transposed"]  # both register-A forms (N = 128 and N = 64) lose imm-trans-b
    # (q_regs' register-A Q K^T form is already K-major, "p, 1, 1, 0;", and stays as it is)
    assert source.count("p, 1, 1, 1;") == 2 and pv.count("p, 1, 1, 1;") == 0
    assert pv.count("p, 1, 1, 0;") == source.count("p, 1, 1, 0;") + 2
    # nothing else moves
    assert sum(a != b for a, b in zip(source.splitlines(), pv.splitlines())) == 2
    dropped = set(source.splitlines()) - set(found["softmax_max_not_reduced"].splitlines())
    # (and the file header's "(shfl.xor 1, 2)": it names the fix)
    assert {line for line in dropped if "(shfl.xor 1, 2)" not in line} == {
        "  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));", "  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));"}
    dropped = set(source.splitlines()) - set(found["row_sum_not_reduced"].splitlines())
    # (in the persistent walk's tile epilogue; its header's "the row sums reduced over the quad here" names the fix)
    assert {line for line in dropped if "reduced over the quad here" not in line} == {
        f"  l{r} += __shfl_xor_sync(0xffffffffu, l{r}, {x});" for r in (0, 1) for x in (1, 2)}
    r = compile_source(pv, "cuda", "sm_90a", "mha_fwd_d128")  # the asm edit still assembles: a wrong kernel, not a build error
    assert r.status == "ok", r.errors


def test_synth_repairs_leaves_the_held_out_bug_classes_out_unless_named():
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app
    from ptxbench.agent.repairs.suite import HELD_OUT_CLASSES

    out = CliRunner().invoke(app, ["synth-repairs", "mha_fwd_d128", "--list"])
    assert out.exit_code == 0, out.output
    held = [c for c in HELD_OUT_CLASSES if f"{c} (held out" in out.output]
    assert held  # the attention forward's softmax_max_not_reduced at least
    first_line = out.output.splitlines()[0]
    assert not any(c in first_line for c in held)  # what would be run by default: none of them


def test_synthesizing_again_into_the_run_replaces_each_pair(tmp_path):
    """synth-repairs may run again into its own run folder: each pair it makes again replaced the old one's kernel
    files but appended its events, one trajectory of two starts and four turns (the Fixit pair twice)."""
    from ptxbench.agent.records.rundir import load_run

    source = render(default_params())
    for _ in range(2):
        synthesize([GEMM], ScriptedEvaluator(source), tmp_path / "run", sources=lambda w: source,
                   prompts=lambda w: ("SYS", "TASK"), feedback=lambda r, t: f"log: {r.status}", mutations=["mbarrier_phase_error"])
    (record,) = load_run(tmp_path / "run")
    assert [e.type for e in record.events].count("trajectory_start") == 1
    rows, _ = build_rows(collect_samples([tmp_path / "run"]), ExportConfig(recipe="fixit", require_target_executed=False, dedup=False))
    assert len(rows) == 1


def test_synth_repairs_names_the_export_command_that_keeps_its_pairs(tmp_path, monkeypatch):
    """The pairs' fixed kernels are evaluated without a profile (no runtime target evidence): the export command it
    prints must keep them, or it exports 0 rows."""
    from typer.testing import CliRunner

    import ptxbench.tools.evaluate as evaluate
    from ptxbench.agent.cli import preflight
    from ptxbench.agent.cli.main import app
    from ptxbench.agent.export import synth

    class NoEvaluator:
        pool = None

        def close(self):
            """Nothing to release."""

    monkeypatch.setattr(preflight, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(evaluate, "LocalEvaluator", NoEvaluator)
    monkeypatch.setattr(synth, "synthesize", lambda *a, **k: synth.SynthReport())
    out = CliRunner().invoke(app, ["synth-repairs", "--run-dir", str(tmp_path / "synth")])
    assert out.exit_code == 0, out.output
    assert "--no-require-target" in " ".join(out.output.split())
