"""The runtime target-instruction verdict, on real H200 profiles and on edge cases built from them."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from ptxbench.tools.profile.runner import summarize
from ptxbench.tools.profile.summary import KernelProfile, ProfileSummary
from ptxbench.tools.profile.verdict import design_allowance, expected_work, runtime_verdicts, static_histogram
from ptxbench.tools.results import KernelResources
from ptxbench.workloads.arch import SM90A, SM100A
from ptxbench.workloads.registry import get_workload

NCU = Path(__file__).parents[1] / "data" / "ncu"
COUNTERS = [c for f in SM90A.families for c in f.counters]


def page(case: str, kind: str) -> str:
    return (NCU / f"{case}.{kind}.csv").read_text()


def verdicts(case: str, raw: str | None = None, static=None, full: bool = True):
    s = summarize(raw or page(case, "raw"), page(case, "details") if full else "", page(case, "source") if full else "", COUNTERS)
    return runtime_verdicts(SM90A, s, static_opcodes=static)


def test_live_wgmma_and_tma_are_executed_with_their_counts():
    v = verdicts("gated_live")
    assert v["wgmma"].verdict == "executed" and v["tma"].verdict == "executed"
    assert (v["wgmma"].executed_warp_insts, v["wgmma"].executed_thread_insts_true) == (320, 10240)
    assert v["wgmma"].counter_values["sm__inst_executed_pipe_tensor_op_gmma.sum"] == 320
    assert (v["tma"].executed_warp_insts, v["tma"].executed_thread_insts_true) == (8, 8)
    assert v["tma"].counter_values["smsp__sass_inst_executed_op_tma_ld.sum"] == 8


def test_wgmma_behind_a_never_taken_branch_is_present_not_executed():
    v = verdicts("gated_dead")
    assert v["wgmma"].verdict == "present_not_executed" and v["tma"].verdict == "present_not_executed"
    assert v["wgmma"].executed_thread_insts_true == 0 and "never" in v["wgmma"].reason


def test_plain_fma_kernel_is_absent():
    v = verdicts("fma")
    assert v["wgmma"].verdict == "absent" and v["tma"].verdict == "absent"


def test_without_the_source_page_presence_comes_from_the_static_sass():
    dead_static = {"HGMMA": 8, "UTMALDG": 1, "FFMA": 0}
    v = verdicts("gated_dead", static=dead_static, full=False)
    assert v["wgmma"].verdict == "present_not_executed"
    v = verdicts("fma", static={"FFMA": 4}, full=False)
    assert v["wgmma"].verdict == "absent"
    v = verdicts("fma", static=None, full=False)
    assert v["wgmma"].verdict == "unknown" and "SASS listing" in v["wgmma"].reason


def test_nan_counts_give_unknown_with_the_reason():
    raw = page("gated_live", "raw")
    header, units, row = raw.splitlines()[:3]
    cells = row.split('","')
    names = header.split('","')
    for metric in ("sass__thread_inst_executed_true_per_opcode", "sass__inst_executed_per_opcode"):
        cells[names.index(metric)] = "nan"
    v = verdicts("gated_live", raw="\n".join([header, units, '","'.join(cells)]))
    assert v["wgmma"].verdict == "unknown" and "NaN" in v["wgmma"].reason


def test_counter_disagreement_is_unknown():
    k = KernelProfile(name="k", opcodes={"HGMMA": 320}, opcodes_true={"HGMMA": 10240}, sass_present=["HGMMA"],
                      counters={"sm__inst_executed_pipe_tensor_op_gmma.sum": 0.0})
    v = runtime_verdicts(SM90A, ProfileSummary(ok=True, kernels=[k]), ["wgmma"])
    assert v["wgmma"].verdict == "unknown" and "disagree" in v["wgmma"].reason


def test_predicated_off_warps_do_not_count_as_executed():
    # warp-level counts include warps whose predicate was false (FACTS.md); only predicate-true decides
    k = KernelProfile(name="k", opcodes={"UTMALDG": 32}, opcodes_true={"UTMALDG": 0}, sass_present=["UTMALDG"],
                      counters={"smsp__sass_inst_executed_op_tma_ld.sum": 0.0})
    v = runtime_verdicts(SM90A, ProfileSummary(ok=True, kernels=[k]), ["tma"])
    assert v["tma"].verdict == "present_not_executed" and v["tma"].executed_warp_insts == 32


def test_a_failed_profile_is_unknown_never_pass_or_fail():
    v = runtime_verdicts(SM90A, ProfileSummary(ok=False, error="ncu timed out after 120 s"))
    assert all(t.verdict == "unknown" and "timed out" in t.reason for t in v.values())
    v = runtime_verdicts(SM90A, ProfileSummary(ok=True, kernels=[]))
    assert all(t.verdict == "unknown" for t in v.values())


def test_counts_add_up_over_the_launches_of_a_plan():
    a = KernelProfile(name="pre", opcodes={"FFMA": 5}, opcodes_true={"FFMA": 160}, sass_present=["FFMA"])
    b = KernelProfile(name="main", opcodes={"HGMMA.64x256x16": 40}, opcodes_true={"HGMMA": 1280}, sass_present=["HGMMA"],
                      counters={"sm__inst_executed_pipe_tensor_op_gmma.sum": 40.0})
    v = runtime_verdicts(SM90A, ProfileSummary(ok=True, kernels=[a, b]), ["wgmma"])
    assert v["wgmma"].verdict == "executed" and v["wgmma"].executed_warp_insts == 40


def test_blackwell_tcgen05_opcodes_and_counters():
    fam = SM100A.family("tcgen05")
    assert all(fam.matches_opcode(op) for op in ("UTCHMMA", "UTCQMMA", "UTCBAR", "UTCATOMSWS", "LDTM", "STTM"))
    assert not fam.matches_opcode("HGMMA") and fam.counters
    k = KernelProfile(name="k", opcodes={"UTCHMMA": 64, "LDTM": 32}, opcodes_true={"UTCHMMA": 64, "LDTM": 1024},
                      sass_present=["UTCHMMA", "LDTM", "UTMALDG"], counters={})
    v = runtime_verdicts(SM100A, ProfileSummary(ok=True, kernels=[k]))
    assert v["tcgen05"].verdict == "executed" and v["tma"].verdict == "present_not_executed"


def test_static_histogram_sums_the_module():
    kernels = {"a": KernelResources(name="a", sass_opcodes={"HGMMA": 4, "FFMA": 2}),
               "b": KernelResources(name="b", sass_opcodes={"FFMA": 3})}
    assert static_histogram(kernels) == {"HGMMA": 4, "FFMA": 5}


def _verdict_level(counters: dict[str, float], static: dict[str, int] | None):
    k = KernelProfile(name="k", counters=counters)  # no per-opcode counts at the verdict level
    return runtime_verdicts(SM90A, ProfileSummary(ok=True, mode="verdict", kernels=[k]), static_opcodes=static)


def test_the_verdict_level_decides_on_the_instruction_counters():
    live = {"sm__inst_executed_pipe_tensor_op_gmma.sum": 320.0, "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum": 5.2e6,
            "smsp__sass_inst_executed_op_tma.sum": 8.0, "smsp__sass_inst_executed_op_tma_ld.sum": 8.0}
    v = _verdict_level(live, {"HGMMA": 8, "UTMALDG": 1})
    assert v["wgmma"].verdict == "executed" and v["tma"].verdict == "executed"
    assert "hardware counters" in v["wgmma"].reason and v["wgmma"].executed_thread_insts_true is None
    dead = {c: 0.0 for c in live}
    v = _verdict_level(dead, {"HGMMA": 8, "UTMALDG": 1})
    assert v["wgmma"].verdict == "present_not_executed" and v["tma"].verdict == "present_not_executed"
    assert _verdict_level(dead, {"FFMA": 4})["wgmma"].verdict == "absent"
    assert _verdict_level(dead, None)["wgmma"].verdict == "unknown"


def test_the_verdict_level_never_guesses():
    # a decisive counter missing (NaN or not collected) -> unknown, not absent or executed
    v = _verdict_level({"sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum": 5.2e6}, {"HGMMA": 8})
    assert v["wgmma"].verdict == "unknown" and "sm__inst_executed_pipe_tensor_op_gmma.sum" in v["wgmma"].reason
    # work counted where the SASS has none of the family's opcodes: the counter is not what it claims
    v = _verdict_level({"sm__inst_executed_pipe_tensor_op_gmma.sum": 40.0}, {"FFMA": 4})
    assert v["wgmma"].verdict == "unknown"
    # at the full level a missing per-opcode count is still unknown (the counters alone never decide there)
    k = KernelProfile(name="k", counters={"sm__inst_executed_pipe_tensor_op_gmma.sum": 40.0})
    full = runtime_verdicts(SM90A, ProfileSummary(ok=True, mode="full", kernels=[k]), ["wgmma"], {"HGMMA": 8})
    assert full["wgmma"].verdict == "unknown"


def test_a_family_that_did_a_token_share_of_the_work_is_a_token():
    """One wgmma (or one TMA load) beside a kernel that does its work another way: executed, but its work counter
    holds a sliver of the workload's FLOPs (bytes), so the verdict is `token`, with the share, and the kernel does
    not count as executing its targets."""
    from ptxbench.tools.profile.verdict import TOKEN_SHARE
    from ptxbench.tools.results import EvalResult
    from ptxbench.workloads.registry import get_workload

    s = summarize(page("gated_live", "raw"), page("gated_live", "details"), page("gated_live", "source"), COUNTERS)
    flops = runtime_verdicts(SM90A, s)["wgmma"].counter_values["sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum"]
    tma_bytes = runtime_verdicts(SM90A, s)["tma"].counter_values["l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"]
    assert flops > 0 and tma_bytes > 0
    did_it = runtime_verdicts(SM90A, s, work={"flops": flops, "input_bytes": tma_bytes / 3})
    assert did_it["wgmma"].verdict == "executed" and did_it["wgmma"].work_share == 1.0
    assert did_it["tma"].verdict == "executed" and did_it["tma"].work_share == 3.0  # tiles re-read: more than once
    token = runtime_verdicts(SM90A, s, work={"flops": flops * 100, "input_bytes": tma_bytes * 1000})
    assert token["wgmma"].verdict == token["tma"].verdict == "token"
    assert token["wgmma"].work_share == 0.01 and "1% of the workload's" in token["wgmma"].reason
    assert token["wgmma"].work_share < TOKEN_SHARE
    assert runtime_verdicts(SM90A, s)["wgmma"].work_share is None  # no workload given: nothing to compare with
    result = EvalResult(workload="w", status="PASSED", gpu_evaluated=True, targets_runtime=token)
    assert result.target_executed is False
    # the workload's side: its FLOPs and its inputs' bytes (A and B of the main GEMM: 84 + 73 MB)
    work = expected_work(get_workload("gemm_bf16_m8192_n7168_k5120"))
    assert work == {"flops": 2.0 * 8192 * 7168 * 5120, "input_bytes": 2.0 * (8192 + 7168) * 5120}
    # the main GEMM's reference on the H200 (gemm_sweep round 13): its HGMMA FLOPs are exactly the workload's
    assert 601295421440.0 / work["flops"] == 1.0


def test_wgmma_beside_the_same_work_on_the_cuda_cores_is_a_decoy():
    """A kernel that runs enough wgmma (on anything) to pass the work share while it computes its output with FFMA:
    the family's `elsewhere` counters hold the workload's FLOPs a second time, so the verdict is a token (a decoy),
    with both shares. An honest kernel's few CUDA-core FLOPs (softmax, the epilogue) leave it executed."""
    from ptxbench.tools.profile.verdict import TOKEN_SHARE

    ffma = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
    wgmma = SM90A.family("wgmma")
    assert ffma in wgmma.elsewhere and wgmma.elsewhere[ffma] == 2.0  # an FFMA is two FLOPs
    flops = 2.0 * 256 * 256 * 512
    counters = {"sm__inst_executed_pipe_tensor_op_gmma.sum": 320.0,
                "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum": flops}

    def verdict(extra: dict[str, float]):
        k = KernelProfile(name="k", counters={**counters, **extra})
        return runtime_verdicts(SM90A, ProfileSummary(ok=True, mode="verdict", kernels=[k]), ["wgmma"], {"HGMMA": 8},
                                work={"flops": flops, "input_bytes": 1.0})["wgmma"]

    decoy = verdict({ffma: flops / 2})  # every multiply-add of the GEMM once more, one FFMA each
    assert decoy.verdict == "token" and decoy.work_share == 1.0 and decoy.elsewhere_share == 1.0
    assert "decoy" in decoy.reason and ffma in decoy.reason and "100% of the workload's" in decoy.reason
    honest = verdict({ffma: flops / 2 * 0.02})  # 2%: a softmax's or an epilogue's arithmetic
    assert honest.verdict == "executed" and honest.elsewhere_share == pytest.approx(0.02)
    edge = verdict({ffma: flops / 2 * TOKEN_SHARE})  # half the work elsewhere: not a kernel that uses its targets
    assert edge.verdict == "token"
    unmeasured = verdict({})  # a profile without the counters (an older record): no claim either way
    assert unmeasured.verdict == "executed" and unmeasured.elsewhere_share is None
    # the same GEMM in doubles (the CUDA cores' DFMA, the tensor cores' DMMA), in tf32 or from int8 products
    for name, per in (("smsp__sass_thread_inst_executed_op_dfma_pred_on.sum", 2.0),
                      ("sm__ops_path_tensor_src_fp64.sum", 1.0),
                      ("sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32.sum", 1.0),
                      ("sm__ops_path_tensor_op_imma_src_int8.sum", 1.0)):
        other = verdict({name: flops / per})
        assert other.verdict == "token" and other.elsewhere_share == 1.0 and name in other.reason, name


def test_tma_beside_the_inputs_read_by_plain_loads_is_a_decoy_except_where_the_op_reads_them_so():
    """TMA loading every input byte once (work share 1.0) while the kernel computes from plain loads or cp.async: the
    bytes those requested are TMA's `elsewhere`, a decoy past half the inputs' bytes. The attention backward's
    reference reads O and dO with plain loads, and its dQ accumulator (0.81-0.82 of its inputs' bytes on the H200), so
    its op's threshold is raised by its allowance, in its tensors' bytes; a backward that computes from plain loads
    re-reads its tiles and still passes it."""
    lsu = "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum"
    ldgsts = "sm__sass_l1tex_t_sectors_pipe_lsu_mem_global_op_ldgsts.sum"
    atom = "l1tex__t_bytes_pipe_lsu_mem_global_op_atom.sum"
    tma = SM90A.family("tma")
    assert tma.elsewhere == {lsu: 1.0, ldgsts: 32.0, atom: 1.0}
    assert tma.elsewhere_allowance == {"mha_bwd": {"O": 1.0, "dO": 1.0, "dQ": 2.0, "dK": 2.0, "dV": 2.0}}
    gemm = get_workload("smoke_gemm_bf16_m256_n256_k512")
    inputs = expected_work(gemm)["input_bytes"]
    assert inputs == 524288.0  # A and B

    def verdict(extra: dict[str, float], wl=gemm, nbytes: float = inputs):
        counters = {"smsp__sass_inst_executed_op_tma_ld.sum": 128.0, "smsp__sass_inst_executed_op_tma.sum": 128.0,
                    "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum": nbytes}
        k = KernelProfile(name="k", counters={**counters, **extra})
        work = {"flops": 1.0, "input_bytes": nbytes}
        return runtime_verdicts(SM90A, ProfileSummary(ok=True, mode="verdict", kernels=[k]), ["tma"], {"UTMALDG": 1},
                                work=work, wl=wl)["tma"]

    honest = verdict({lsu: 0.0, ldgsts: 0.0})
    assert honest.verdict == "executed" and honest.work_share == 1.0 and honest.elsewhere_share == 0.0
    plain = verdict({lsu: 256 * inputs})  # the smoke decoy (tests/data/profile/solutions/tma_decoy.cu)
    assert plain.verdict == "token" and "decoy" in plain.reason and lsu in plain.reason
    once = verdict({lsu: inputs})  # every input byte read once by plain loads (a decode GEMM's B is read once)
    assert once.verdict == "token" and once.elsewhere_share == 1.0
    copied = verdict({ldgsts: inputs / 32})  # cp.async of every input byte once: 32 bytes a sector
    assert copied.verdict == "token" and copied.elsewhere_share == 1.0 and ldgsts in copied.reason
    # the operands read by atomics that leave them as they are (`atom.global.or.b32 r, [p], 0`), TMA loading junk
    fetched = verdict({lsu: 0.0, ldgsts: 0.0, atom: 4 * inputs})
    assert fetched.verdict == "token" and fetched.elsewhere_share == 4.0 and atom in fetched.reason
    assert verdict({lsu: 0.0}).elsewhere_share == 0.0  # a counter ncu dropped: the other still decides
    assert verdict({lsu: 0.82 * inputs}).verdict == "token"  # a GEMM has no business reading its inputs so
    assert verdict({lsu: 0.82 * inputs}, wl=None).verdict == "token"  # no workload known: no allowance

    # The backward: O, dO and the fp32 dQ, dK, dV accumulators, in bytes of its own tensors (8 of its 10 bf16
    # tensors' worth on MHA, 1.42 of its inputs with GQA's four query heads per KV head).
    mha, gqa = get_workload("mha_bwd_d128"), get_workload("mha_bwd_d128_gqa_h32_kv8")
    assert design_allowance(tma, mha, expected_work(mha)["input_bytes"]) == pytest.approx(1.595, abs=1e-3)
    assert design_allowance(tma, gqa, expected_work(gqa)["input_bytes"]) == pytest.approx(1.422, abs=1e-3)
    assert design_allowance(tma, gemm, inputs) == 0.0 and design_allowance(tma, None, inputs) == 0.0
    for wl in (mha, gqa):
        n = expected_work(wl)["input_bytes"]
        reference = verdict({lsu: 0.82 * n}, wl, n)  # the reference: preprocessing and dQ's conversion (run 17)
        assert reference.verdict == "executed" and reference.elsewhere_share == pytest.approx(0.82)
        limit = 0.5 + design_allowance(tma, wl, n)
        assert verdict({lsu: (limit - 0.01) * n}, wl, n).verdict == "executed"  # every honest design's reads
        assert verdict({lsu: limit * n}, wl, n).verdict == "token"
        # a backward computed from plain loads: Q and dO read once per 128-row KV block (32 times at S = 4096)
        from_plain = verdict({lsu: 32 * 2 * math.prod(wl.shape("Q")) * 2}, wl, n)
        assert from_plain.verdict == "token" and f"at least {100 * limit:.0f}%" in from_plain.reason


def test_the_decoy_counters_are_collected_with_the_familys(monkeypatch, tmp_path):
    """The verdict pass asks ncu for the `elsewhere` counters (a counter not asked for is never in the profile)."""
    from ptxbench.tools.profile import candidate, runner

    asked = {}
    monkeypatch.setattr(runner, "profile_command", lambda argv, counters, **kw: asked.setdefault("counters", counters))
    monkeypatch.setattr(candidate, "replay_argv", lambda *a, **k: ["replay"])
    candidate.measure_candidate("gemm_bf16_m8192_n7168_k5120", "source", tmp_path / "k.cubin", full=False)
    for fam in (SM90A.family("wgmma"), SM90A.family("tma")):
        assert set(fam.counters) | set(fam.elsewhere) <= set(asked["counters"])


def test_a_token_verdict_is_told_to_the_model_and_drops_the_feature():
    from ptxbench.tools.profile.feedback import _verdict_items, traits
    from ptxbench.tools.results import RuntimeTarget

    v = {"wgmma": RuntimeTarget(verdict="token", work_share=0.001, reason="wgmma executed, but ... 0.1% of the workload's")}
    (weight, text), = _verdict_items(v, "sm_90a")
    assert weight == 1000.0 and "share of the work is a token" in text and "wgmma.mma_async" in text and "0.1%" in text
    assert "wgmma" not in traits(None, v, None).has


def test_the_recorded_reference_kernels_did_their_whole_work_on_their_targets():
    """The threshold against H200 records: the main GEMM's reference (HGMMA FLOPs exactly 2MNK) and every profiled
    turn of the three recorded attention-backward climbs; each far above TOKEN_SHARE."""
    import json

    from ptxbench.tools.profile.verdict import TOKEN_SHARE, expected_work
    from ptxbench.workloads.registry import get_workload

    root = Path(__file__).parents[2]
    flops_c, tma_c = "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum", "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"
    shares = []
    gemm = json.loads((root / "bench/results/gemm_sweep/r13_eval_8_ref_2026-12-03.json").read_text())
    text = json.dumps(gemm)
    work = expected_work(get_workload("gemm_bf16_m8192_n7168_k5120"))
    assert f'"{flops_c}": {work["flops"]}' in text  # 601295421440.0: exactly the workload's FLOPs
    for run in sorted((root / "docs/examples/tuner-climb-mha_bwd_d128").glob("run*/trajectories/*/trajectory.jsonl")):
        work = expected_work(get_workload("mha_bwd_d128"))
        for line in run.read_text().splitlines():
            for fam in json.loads(line).get("result", {}).get("targets_runtime", {}).values():
                values = fam.get("counter_values", {})
                shares += [values[c] / work[k] for c, k in ((flops_c, "flops"), (tma_c, "input_bytes")) if values.get(c)]
    assert len(shares) >= 6 and min(shares) >= 1.0 > TOKEN_SHARE, shares
