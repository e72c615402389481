"""The backward's rotate_d64 and pair_rotate variants (workloads/solutions/attention_bwd_variants/rotate_d64.py): each
non-causal D = 64 CTA walks a head's query blocks from its own key block's index. Checked here: only the non-causal
D = 64 kernels change (the 128-wide and causal ones are their bases', opcode for opcode), within the spills their
bases have; and a mirror of the kernel's lines shows that the producer's rows, the consumers' q0 and the writers'
stepped rows name the same query block at every step, and each (head, block) exactly once."""
from __future__ import annotations

import pytest

from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

from bwd_variant_checks import D64, D96, D128, compile_variants


@pytest.fixture(scope="module")
def compiled():
    return compile_variants("mha_bwd_d64", "rotate_d64+head_groups", "pair_rotate+head_groups",
                            "writer_d96+head_groups", "pair_d64+head_groups")


@pytest.mark.parametrize("variant,base", [("rotate_d64", "writer_d96"), ("pair_rotate", "pair_d64")])
def test_only_the_non_causal_d64_kernels_change(compiled, variant, base):
    mine, ref = compiled[f"{variant}+head_groups"], compiled[f"{base}+head_groups"]
    assert mine.status == "ok"
    for name in D128 + D96 + ("attn_bwd_wgmma_d64_causal",):
        assert mine.kernels[name].sass_opcodes == ref.kernels[name].sass_opcodes, name
    for name in ("attn_bwd_wgmma_d64", "attn_bwd_wgmma_d64_gqa"):
        k = mine.kernels[name]
        assert k.sass_opcodes != ref.kernels[name].sass_opcodes, name
        assert k.sass_opcodes["HGMMA"] == ref.kernels[name].sass_opcodes["HGMMA"], name
        # rotate_d64 adds none; pair_rotate stays within pair_d64's (24 bytes stored)
        assert k.spill_stores <= ref.kernels[name].spill_stores + (0 if variant == "rotate_d64" else 8), name


def _walk(per_head: int, heads: int, rot: int, S_over_QR: int):
    """Mirror of the kernel's lines (QR = D = 1 units): (producer block, consumer block, writer block) per step."""
    S, q_first, n_iter = S_over_QR, 0, heads * per_head  # non-causal: q_first = 0
    rows, qb, in_head, out = q_first + rot, rot, 0, []
    for it in range(n_iter):
        producer = (it // per_head) * S + (q_first + (it % per_head + rot) % per_head)
        consumer = (it // per_head) * S + (q_first + (it % per_head + rot) % per_head)
        out.append((producer, consumer, rows))
        rows += 1
        qb += 1
        if qb == per_head:
            qb = 0
            rows -= S
        in_head += 1
        if in_head == per_head:
            in_head = 0
            rows += S
    return out


@pytest.mark.parametrize("per_head,heads", [(2, 1), (32, 1), (32, 2), (3, 4)])
def test_the_rotated_walk_takes_every_block_once_and_the_writers_follow_it(per_head, heads):
    for rot in range(per_head):
        steps = _walk(per_head, heads, rot, per_head)
        assert all(p == c == w for p, c, w in steps), (rot, steps)
        assert sorted(p for p, _, _ in steps) == list(range(heads * per_head))
        assert steps[0][0] == rot  # the walk starts at the CTA's own block


def test_the_mirror_matches_the_kernels_lines():
    text = variant_text("pair_rotate+head_groups")
    for line in ("constexpr bool ROT = HD == 64 && !CAUSAL;", "const int rot = ROT ? kb % per_head : 0;",
                 "+ (q_first + (it % per_head + rot) % per_head) * QR;  // rotate_d64",
                 "const int q0 = (q_first + (it % per_head + rot) % per_head) * QR;  // rotate_d64",
                 "+ static_cast<size_t>((q_first + rot) * QR) * D;", "for (int it = 0, in_head = 0, qb = rot;",
                 "if (ROT && ++qb == per_head) {", "rows -= static_cast<size_t>(S) * D;",
                 "rows += static_cast<size_t>(ROT ? S : q_first * QR) * D;"):
        assert line in text, line
    # the 128-wide consumers' q0 is untouched (their producer and writer step rows of their own)
    assert text.count("const int q0 = (q_first + it % per_head) * QR;") == 1
