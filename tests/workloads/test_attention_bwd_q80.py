"""q80, the attention backward with 80-row query blocks at D = 128 non-causal (workloads/solutions/attention_bwd_q80.py):
the plans route exactly those problems to its kernels, which assemble to the expected tensor / stmatrix / bulk work
with no spills, fit the shared memory, and whose index arithmetic (mirrored here line for line) stores every dS and
dQ element once, where the wgmma operand and the postprocess read it, without bank conflicts."""
from __future__ import annotations

from collections import Counter

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.workloads.registry import get_workload, list_workloads
from ptxbench.workloads.solutions import attention_bwd_q80 as q80
from ptxbench.workloads.solutions.attention_backward import fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants import variant_text

BACKWARD = [w.id for w in list_workloads() if w.op == "mha_bwd"]
SMEM_LIMIT = 232448


def _plan(wid: str, text: str):
    w = get_workload(wid)
    return resolve_plan(parse_solution(fast_backward(w, text), w).plan, w, 132, "sm_90a")


def test_only_d128_non_causal_runs_through_q80_and_the_rest_is_the_reference_byte_for_byte():
    text, ref = variant_text("q80"), variant_text("tiles_d96+head_groups")
    routed = set()
    for wid in BACKWARD:
        w = get_workload(wid)
        kernels = [launch.kernel for launch in _plan(wid, text).launches]
        if int(w.symbols["D"]) == 128 and not w.causal:
            routed.add(wid)
            gqa = "HKV" in w.symbols
            assert kernels == ["attn_bwd_pre", "attn_bwd_wgmma_q80" + ("_gqa" if gqa else ""), "attn_bwd_post_q80"]
            assert fast_backward(w, text).count("box = [64, 80]") == 2  # Q and dO in 80-row boxes, K / V keep 128
        else:
            plan = [fast_backward(w, x).split("/* ptxbench", 1)[1].split("*/", 1)[0] for x in (text, ref)]
            assert plan[0] == plan[1], wid
            assert kernels == [launch.kernel for launch in _plan(wid, ref).launches]
    assert {"mha_bwd_d128", "mha_bwd_d128_gqa_h32_kv8"} <= routed


def test_its_shared_memory_fits_and_holds_the_kernels_layout():
    # sK, sV (2 x 16 KiB each), Q / dO ring (2 stages x 2 x 20 KiB), 2 dS buffers, 2 fp32 dQ tiles, L2 / Dr, 7 mbarriers
    need = 2 * 2 * 16384 + 2 * 2 * 2 * 10240 + 2 * 2 * 10240 + 2 * 80 * 64 * 4 + 2 * 2 * 80 * 4 + 7 * 8
    smem = _plan("mha_bwd_d128", variant_text("q80")).launches[1].smem
    assert need + 1023 <= smem <= SMEM_LIMIT, (need, smem)


def test_the_q80_kernels_assemble_to_their_block_and_leave_the_others_alone():
    text = variant_text("q80")
    r = compile_source(fast_backward(get_workload("mha_bwd_d128"), text), "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings, (r.errors, r.warnings)  # no C7512 / C7515 serialisation
    base = compile_source(fast_backward(get_workload("mha_bwd_d128"), variant_text("tiles_d96+head_groups")),
                          "cuda", "sm_90a").kernels
    for name, k in r.kernels.items():
        assert k.spill_stores == 0 and k.spill_loads == 0, name
        if name in base:  # every kernel the reference has is unchanged
            assert k.sass_opcodes == base[name].sass_opcodes, name
    for name in ("attn_bwd_wgmma_q80", "attn_bwd_wgmma_q80_gqa"):
        ops = r.kernels[name].sass_opcodes
        # S^T, dP^T 8 m64n80 each, dV, dK 5 k16 steps each over 80 queries, dQ^T 8 over 128 keys
        assert ops.get("HGMMA") == 8 + 8 + 5 + 5 + 8, (name, ops.get("HGMMA"))
        assert ops.get("STSM") == 5, name       # dS: 20 8x8 fragments, four a stmatrix
        assert ops.get("UBLKRED") == 1 and "REDG" not in ops, name  # dQ by one bulk reduce-add a block
        assert ops.get("STS") == 40, name       # the dQ^T tile, one float each (conflict-free, below)


def _stsm_rows(w: int, lane: int, a: int):
    """consumer_block_q80's stmatrix address line, mirrored: (query row, 16-byte chunk) of lane's stored row."""
    m = lane // 8
    q, g = 8 * (a + m // 2) + lane % 8, 2 * w + m % 2
    return q, g, q * 128 + ((g ^ (q % 8)) << 4)


def test_ds_lands_where_the_dq_product_reads_it():
    """Every (query, key) of a consumer's dS fragments is stored once, at the byte the 128B-swizzled K-major operand
    (rows = queries, 64 keys a 128-byte row, chunk ^ row % 8) holds it: stmatrix .trans writes row i of matrix k (the
    fragment's column i = query) with the 8 keys of the fragment's rows, at the address lane 8k + i gives."""
    placed = {}
    for w in range(4):
        for lane in range(32):
            for a in range(0, 10, 2):
                q, g, addr = _stsm_rows(w, lane, a)
                m = lane // 8  # matrix m is ds[2a + m]: keys 16w + 8 (m % 2).., queries 8 (a + m / 2)..
                for i in range(8):  # key 8 g + i of the consumer's 64, 2 bytes each
                    key = 16 * w + 8 * (m % 2) + i
                    assert 8 * g + i == key and 8 * (a + m // 2) <= q < 8 * (a + m // 2) + 8
                    placed[(q, key)] = addr + 2 * i
    assert sorted(placed) == [(q, k) for q in range(80) for k in range(64)]
    operand = {(q, k): q * 128 + (((k // 8) ^ (q % 8)) << 4) + 2 * (k % 8) for q in range(80) for k in range(64)}
    assert placed == operand
    text = variant_text("q80")
    assert "const int q = 8 * (a + m / 2) + lane % 8, g = 2 * w + m % 2;" in text
    assert "stsm4_trans(buf + c * SLAB80 + q * 128 + ((g ^ (q % 8)) << 4), ds[2 * a], ds[2 * a + 1], ds[2 * a + 2]," in text


def _tile_word(q: int, dd: int) -> int:
    return q * 64 + 8 * ((dd // 8) ^ ((q // 2) % 8)) + dd % 8


@pytest.mark.parametrize("S", [4096, 256, 128, 160])
def test_dq_tiles_cover_the_head_once_and_the_postprocess_reads_them_back(S):
    """Each block's two tiles (qv rows of 64 floats, qv = S - q0 for the last) reduce-add into the head's S x D floats
    without overlap, and attn_bwd_post_q80 reads each (row, column) where its consumer stored it."""
    D, Q80 = 128, 80
    written = {}
    for q0 in range(0, S, Q80):
        qv = min(Q80, S - q0)
        for c in range(2):
            base = q0 * 128 + 64 * qv * c
            for q in range(qv):
                for dd in range(64):
                    written[(q0 + q, 64 * c + dd)] = base + _tile_word(q, dd)
    assert sorted(written.values()) == list(range(S * D))
    for row in range(S):
        for d in range(0, D, 4):
            b, q = row // Q80, row % Q80
            qv, c, dd = min(Q80, S - Q80 * b), d // 64, d % 64
            src = Q80 * b * D + 64 * qv * c + 64 * q + 8 * ((dd // 8) ^ ((q // 2) % 8)) + dd % 8
            assert [src + k for k in range(4)] == [written[(row, d + k)] for k in range(4)] and src % 4 == 0
    text = variant_text("q80")
    assert "if (q < qv) sts32(tile + q * 64 + 8 * ((dd / 8) ^ ((q / 2) % 8)) + dd % 8, __float_as_uint(dq[j]));" in text
    assert "8 * ((dd / 8) ^ ((q / 2) % 8)) + dd % 8;" in text.split("attn_bwd_post_q80", 1)[1]


def test_a_warps_dq_tile_store_hits_every_bank_once():
    for w in range(4):
        for j in range(40):
            banks = Counter()
            for lane in range(32):
                r, col0 = 16 * w + lane // 4, 2 * (lane % 4)
                q, dd = 8 * (j // 4) + col0 + j % 2, r + 8 * ((j // 2) % 2)
                banks[_tile_word(q, dd) % 32] += 1
            assert len(banks) == 32, (w, j, banks)
