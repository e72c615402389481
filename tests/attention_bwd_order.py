"""The attention backward's head_groups order, mirrored for the tests of the variants that decode it themselves
(tail_split, tail_kernel): which key block of which KV head item `lin` is, and every unit of work of a workload."""
from __future__ import annotations

HEAD_GROUP, BN = 4, 128  # heads launched side by side; keys per block


def key_block(lin: int, n_kb: int, kv_heads: int) -> tuple[int, int]:
    """(key block, batch x KV head) of item `lin`: groups of HEAD_GROUP heads, key blocks across the group."""
    grp, in_grp = lin // (HEAD_GROUP * n_kb), lin % (HEAD_GROUP * n_kb)
    g_heads = min(HEAD_GROUP, kv_heads - grp * HEAD_GROUP)
    return in_grp // g_heads, grp * HEAD_GROUP + in_grp % g_heads


def n_iter(kb: int, s: int, qr: int, group: int, causal: bool) -> int:
    """Query iterations of key block kb: every query block of its heads (causal: from the diagonal on)."""
    return group * (s // qr - ((kb * BN // qr) if causal else 0))


def all_units(s: int, qr: int, group: int, causal: bool, kv_heads: int) -> set[tuple[int, int, int]]:
    """Every (batch x KV head, key block, query iteration) of a workload."""
    return {(bkv, kb, it) for bkv in range(kv_heads) for kb in range(s // BN)
            for it in range(n_iter(kb, s, qr, group, causal))}


def shape(workload) -> tuple[int, int, int, bool, int]:
    """(S, query rows per iteration, query heads per KV head, causal, batch x KV heads) of a backward workload."""
    sym = workload.symbols
    heads, kv = int(sym["H"]), int(sym.get("HKV", sym["H"]))
    return int(sym["S"]), 128 if int(sym["D"]) == 64 else 64, heads // kv, bool(workload.causal), int(sym["B"]) * kv
