"""The workload registry, the arch profiles and `ptxbench workloads` (CPU only, no torch needed)."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ptxbench.agent.cli.main import app
from ptxbench.workloads.arch import ARCHS, SM90A, SM100A, get_arch
from ptxbench.workloads.registry import MAIN_IDS, WORKLOADS, get_workload, list_workloads

B, H, S, D = 4, 48, 4096, 128
BHSD = (B, H, S, D)

MAIN = {
    "gemm_bf16_m8192_n7168_k5120": {"A": (8192, 5120), "B": (7168, 5120), "C": (8192, 7168)},
    "mha_fwd_d128": {"Q": BHSD, "K": BHSD, "V": BHSD, "O": BHSD, "LSE": (B, H, S)},
    "mha_fwd_d128_causal": {"Q": BHSD, "K": BHSD, "V": BHSD, "O": BHSD, "LSE": (B, H, S)},
    "mha_bwd_d128": {n: BHSD for n in ("Q", "K", "V", "O", "dO", "dQ", "dK", "dV")} | {"LSE": (B, H, S)},
    "mha_bwd_d128_causal": {n: BHSD for n in ("Q", "K", "V", "O", "dO", "dQ", "dK", "dV")} | {"LSE": (B, H, S)},
}

HELD_OUT = [f"mha_{k}_d{d}{c}" for d in (64, 96) for k in ("fwd", "bwd") for c in ("", "_causal")] + [
    "mha_fwd_d128_gqa_h32_kv8", "mha_fwd_d128_gqa_h32_kv8_causal", "mha_bwd_d128_gqa_h32_kv8", "gemm_bf16_m64_n7168_k5120", "gemm_bf16_m128_n7168_k5120", "gemm_bf16_m4096_n4096_k4096"]

SMOKE = ["smoke_gemm_bf16_m256_n256_k512", "smoke_mha_fwd_d64", "smoke_mha_fwd_d64_causal", "smoke_mha_bwd_d64",
         "smoke_mha_bwd_d64_causal", "smoke_mha_fwd_d64_gqa_h4_kv2", "smoke_mha_bwd_d64_gqa_h4_kv2"]


@pytest.mark.parametrize("wid", list(MAIN))
def test_main_tasks_have_exact_shapes_dtypes_and_roles(wid):
    w = get_workload(wid)
    assert {t.name: w.shape(t.name) for t in w.tensors} == MAIN[wid]
    assert not w.held_out and w.tags == ["main"]
    for t in w.tensors:
        assert t.dtype == ("float32" if t.name == "LSE" else "bfloat16")
    roles = {t.name: t.role for t in w.tensors}
    outputs = {"gemm": {"C"}, "mha_fwd": {"O", "LSE"}, "mha_bwd": {"dQ", "dK", "dV"}}[w.op]
    assert {n for n, r in roles.items() if r == "output"} == outputs
    assert w.causal == wid.endswith("_causal")


def test_main_ids_in_order():
    assert MAIN_IDS == list(MAIN)


def test_attention_scale_and_symbols():
    for wid in list(MAIN)[1:]:
        w = get_workload(wid)
        assert {k: w.symbols[k] for k in "BHSD"} == dict(zip("BHSD", BHSD))
        assert w.symbols["scale"] == pytest.approx(1 / math.sqrt(128))
    assert get_workload("gemm_bf16_m8192_n7168_k5120").symbols == {"M": 8192, "N": 7168, "K": 5120}


def test_flops_follow_the_conventions():
    fwd = 4.0 * B * H * S * S * D
    assert get_workload("gemm_bf16_m8192_n7168_k5120").flops == 2.0 * 8192 * 7168 * 5120
    assert get_workload("mha_fwd_d128").flops == fwd
    assert get_workload("mha_fwd_d128_causal").flops == fwd / 2
    assert get_workload("mha_bwd_d128").flops == 2.5 * fwd
    assert get_workload("mha_bwd_d128_causal").flops == 2.5 * fwd / 2
    assert get_workload("mha_fwd_d128_gqa_h32_kv8").flops == 4.0 * B * 32 * S * S * D
    assert get_workload("mha_bwd_d128_gqa_h32_kv8").flops == 2.5 * 4.0 * B * 32 * S * S * D  # H query heads


def test_min_bytes_reads_inputs_once_and_writes_outputs_once():
    assert get_workload("gemm_bf16_m8192_n7168_k5120").min_bytes == 2 * (8192 * 5120 + 7168 * 5120 + 8192 * 7168)
    bhsd, lse = B * H * S * D, B * H * S
    assert get_workload("mha_fwd_d128").min_bytes == 2 * 4 * bhsd + 4 * lse
    assert get_workload("mha_bwd_d128").min_bytes == 2 * 8 * bhsd + 4 * lse
    gqa = get_workload("mha_fwd_d128_gqa_h32_kv8")
    assert gqa.min_bytes == 2 * (2 * B * 32 * S * D + 2 * B * 8 * S * D) + 4 * B * 32 * S
    # backward: Q, O, dO, dQ over the query heads; K, V, dK, dV over the KV heads; LSE read once
    q_like, kv_like = B * 32 * S * D, B * 8 * S * D
    assert get_workload("mha_bwd_d128_gqa_h32_kv8").min_bytes == 2 * (4 * q_like + 4 * kv_like) + 4 * B * 32 * S


def test_held_out_and_smoke_sets():
    held = [w.id for w in list_workloads(tags=["held_out"])]
    assert held == HELD_OUT
    assert all(get_workload(i).held_out for i in HELD_OUT + SMOKE)
    assert [w.id for w in list_workloads(tags=["smoke"])] == SMOKE
    assert [w.id for w in list_workloads(include_held_out=False)] == list(MAIN)
    assert len(list_workloads()) == len(MAIN) + len(HELD_OUT) + len(SMOKE)
    gqa = get_workload("mha_fwd_d128_gqa_h32_kv8")
    assert gqa.symbols["H"] == 32 and gqa.symbols["HKV"] == 8
    assert gqa.shape("K") == gqa.shape("V") == (4, 8, 4096, 128) and gqa.shape("O") == (4, 32, 4096, 128)
    assert get_workload("smoke_mha_fwd_d64").shape("Q") == (1, 2, 256, 64)


@pytest.mark.parametrize("wid,b,h,hkv,s,d", [("mha_bwd_d128_gqa_h32_kv8", 4, 32, 8, 4096, 128),
                                             ("smoke_mha_bwd_d64_gqa_h4_kv2", 1, 4, 2, 256, 64)])
def test_gqa_backward_shapes_roles_and_statement(wid, b, h, hkv, s, d):
    w = get_workload(wid)
    assert w.op == "mha_bwd" and not w.causal and w.held_out
    assert {k: w.symbols[k] for k in ("B", "H", "HKV", "S", "D")} == {"B": b, "H": h, "HKV": hkv, "S": s, "D": d}
    q, kv = (b, h, s, d), (b, hkv, s, d)
    assert {t.name: w.shape(t.name) for t in w.tensors} == {
        "Q": q, "K": kv, "V": kv, "O": q, "dO": q, "LSE": (b, h, s), "dQ": q, "dK": kv, "dV": kv}
    assert [t.name for t in w.outputs] == ["dQ", "dK", "dV"]
    g = h // hkv  # the same grouping as the GQA forward: query head i reads (and sends gradient to) KV head i // g
    fwd = get_workload(wid.replace("_bwd_", "_fwd_"))
    assert f"query head i reads KV head i // {g}" in w.doc and f"query head i reads KV head i // {g}" in fwd.doc
    assert f"sums over the {g} query heads j*{g} .. j*{g}+{g - 1}" in w.doc
    assert "expanded to H heads" in w.doc and "summed over each group inside the timed baseline call" in w.doc


def test_every_workload_is_complete():
    for w in WORKLOADS.values():
        assert w.primary_baseline.name == ("cublas" if w.op == "gemm" else "cudnn_sdpa")
        if w.op != "gemm":
            assert [b.name for b in w.baselines] == ["cudnn_sdpa", "flash_sdpa"]
        assert w.reference == w.op
        assert w.trials == 3
        assert w.input_dist == (["normal", "spiky"] if w.op == "mha_bwd" else ["normal"])
        assert w.tolerance.atol == w.tolerance.rtol == 1e-2
        assert w.tolerance.max_rel_fro == 1e-2
        assert w.tolerance.tensors == ({"LSE": {"atol": 4e-3, "rtol": 1e-4, "max_rel_fro": 1e-4}} if w.op == "mha_fwd" else {})
        lse = w.tolerance.for_tensor("LSE")
        assert (lse.atol, lse.max_rel_fro, lse.tensors) == ((4e-3, 1e-4, {}) if w.op == "mha_fwd" else (1e-2, 1e-2, {}))
        assert w.tolerance.for_tensor("O") is w.tolerance and lse.library_factor == w.tolerance.library_factor
        assert w.targets == {"sm_90a": ["wgmma", "tma"], "sm_100a": ["tcgen05", "tma"]}
        for arch, families in w.targets.items():
            for f in families:
                get_arch(arch).family(f)  # raises if the arch does not define the family


def test_get_workload_miss_lists_ids_and_returns_copies():
    with pytest.raises(KeyError, match="gemm_bf16_m8192_n7168_k5120"):
        get_workload("gemm_fp8")
    w = get_workload("mha_fwd_d128")
    w.symbols["S"] = 1
    assert get_workload("mha_fwd_d128").symbols["S"] == 4096


def test_registry_does_not_import_torch():
    code = ("import sys, ptxbench.workloads.registry, ptxbench.agent.cli.cmd_workloads; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_arch_profiles():
    assert set(ARCHS) == {"sm_90a", "sm_100a"}
    assert SM90A.gpus == ["H100", "H200"] and SM100A.gpus == ["B200"]
    wgmma, tma, tc = SM90A.family("wgmma"), SM90A.family("tma"), SM100A.family("tcgen05")
    assert wgmma.matches_opcode("HGMMA.64x128x16.F32.BF16") and not wgmma.matches_opcode("HMMA.16816.F32.BF16")
    assert wgmma.in_ptx("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16")
    assert all(tma.matches_opcode(op) for op in ("UTMALDG.2D", "UTMASTG.2D", "UTMAREDG.2D"))
    assert tma.in_ptx("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes")
    assert all(tc.matches_opcode(op) for op in ("UTCHMMA", "UTCBAR", "LDTM.x16", "STTM.x16"))
    assert tc.in_ptx("tcgen05.mma.cta_group::1.kind::f16") and not tc.in_ptx("wgmma.fence")
    assert SM100A.family("tma") == tma
    with pytest.raises(KeyError, match="sm_90a"):
        get_arch("sm_80")


def test_cli_json_lists_every_workload():
    res = CliRunner().invoke(app, ["workloads", "--json"])
    assert res.exit_code == 0, res.output
    records = {r["id"]: r for r in json.loads(res.output)["workloads"]}
    assert list(records) == list(WORKLOADS)
    for wid, shapes in MAIN.items():
        r = records[wid]
        assert {k: tuple(v) for k, v in r["shapes"].items()} == shapes
        assert r["held_out"] is False and r["tags"] == ["main"]
    for wid in HELD_OUT + SMOKE:
        assert records[wid]["held_out"] is True
    bwd = records["mha_bwd_d128"]
    assert bwd["roles"]["dO"] == "input" and bwd["roles"]["dK"] == "output" and bwd["dtypes"]["LSE"] == "float32"
    assert bwd["baselines"] == ["cudnn_sdpa", "flash_sdpa"] and bwd["primary_baseline"] == "cudnn_sdpa"
    assert bwd["targets"]["sm_90a"] == ["wgmma", "tma"] and bwd["flops"] == 2.5 * 4 * B * H * S * S * D
    assert set(bwd) >= {"symbols", "min_bytes", "op", "tensors"}


def test_cli_table_flags_held_out_and_hides_smoke():
    res = CliRunner().invoke(app, ["workloads"])
    assert res.exit_code == 0, res.output
    assert "mha_bwd_d128_causal" in res.output and "held-out" in res.output
    assert "smoke_" not in res.output
    res_all = CliRunner().invoke(app, ["workloads", "--all"])
    assert "smoke_mha_bwd_d64_causal" in res_all.output


def test_attention_tasks_state_mask_scale_gqa_and_lse_and_the_reference_agrees():
    import math

    import torch

    from ptxbench.workloads.inputs import make_inputs
    from ptxbench.workloads.references import run_reference

    for w in list_workloads():
        if w.op not in ("mha_fwd", "mha_bwd"):
            continue
        d = int(w.symbols["D"])
        assert ("Causal: key j is masked for query i when j > i" in w.doc) == w.causal, w.id
        assert f"1/sqrt({d}) exactly" in w.doc and w.symbols["scale"] == 1.0 / math.sqrt(d)
        assert "natural log (base e" in w.doc
        if "HKV" in w.symbols:
            assert f"reads KV head i // {int(w.symbols['H']) // int(w.symbols['HKV'])}" in w.doc
    # what the words say is what the reference computes (smoke shapes, CPU)
    for wid in ("smoke_mha_fwd_d64_causal", "smoke_mha_fwd_d64_gqa_h4_kv2"):
        w = get_workload(wid)
        x = make_inputs(w, 1, "normal", "cpu")
        ref = run_reference(w, x)
        q, k = x["Q"].double(), x["K"].double()
        group = int(w.symbols["H"]) // int(w.symbols.get("HKV", w.symbols["H"]))
        s = torch.einsum("bhid,bhjd->bhij", q, k.repeat_interleave(group, dim=1)) * w.symbols["scale"]
        if w.causal:
            s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
        assert torch.allclose(ref["LSE"].double(), torch.logsumexp(s, dim=-1), atol=1e-4)


def test_the_forward_task_states_the_scores_its_check_inputs_reach():
    """The forward's check draws offset rows (every score past exp's range, above inputs.OFFSET_FLOOR: tested in
    tests/tools/test_correctness_cheats.py) and a spiked key (workloads/inputs.py); the task says so with the same
    numbers, so a kernel without a running max fails on what it was told."""
    inputs = pytest.importorskip("ptxbench.workloads.inputs")
    forwards = [w for w in WORKLOADS.values() if w.op == "mha_fwd"]
    assert len(forwards) >= 11
    for w in forwards:
        assert f"scores all exceed {inputs.OFFSET_FLOOR:g}" in w.doc and "beside plain rows" in w.doc, w.id
        assert f"scores about {inputs.SPIKE:g} above the rest" in w.doc and "running max" in w.doc, w.id
    assert all("running max" not in w.doc for w in WORKLOADS.values() if w.op != "mha_fwd")
