"""The GEMM template's L2 feeders (feed > 0, workloads/solutions/gemm_l2_feed.py): FEED_CTAS CTAs after the tile
CTAs prefetch into L2 the A and B k-blocks of the rounds in flight, `feed` k-steps ahead of the producers, whose
progress every FEED_EVERY-th producer reports by adding to an unzeroed scratch counter.

Here: the option validates only where it can run; the plan gives the feeders their CTAs, the operands and the
counter (never zeroed: no memset is timed); the Python model of feed_step's ownership rule covers every box of every
round exactly once, for the main GEMM and ragged shapes; the renders assemble for sm_90a without spills, and the box
feeders leave the consumers' loop as it was; on the GPU the result matches torch on the main GEMM, a small, a ragged
and a short-K shape (fewer tiles than CTAs, a partial last round)."""
from __future__ import annotations

import pytest

from ptxbench.workloads.solutions import gemm_l2_feed as feed
from ptxbench.workloads.solutions import gemm_template as gt

from gemm_helpers import check_against_torch, clean_kernel, compile_points

MAIN = "gemm_bf16_m8192_n7168_k5120"
VARIANTS = {
    "feed4_lines": {**gt.default_params().model_dump(), "feed": 4},
    "feed8_boxes": {**gt.default_params().model_dump(), "feed": 8, "feed_boxes": True},
    "feed16_g8": {"defer": True, "feed": 16},
}
SHAPES = [(8192, 7168, 5120), (256, 256, 512), (200, 296, 328), (1024, 1024, 128)]


def test_feed_is_an_option_off_by_default():
    assert "feed" not in gt.GemmParams().model_dump() and "feed" not in gt.default_params().model_dump()
    assert "feed_l2" not in gt.render(gt.default_params())


@pytest.mark.parametrize("bad, phrase", [
    ({"feed": 8, "cluster_m": 2}, "cluster_m=1"),
    ({"feed": 8, "order": "hilbert"}, "order='grouped'"),
    ({"feed": 8, "persistent": False}, "persistent=True"),
    ({"feed": 8, "tail": "streamk"}, "tail='none'"),
    ({"feed": 8, "max_ctas": 0}, "max_ctas > 0"),
    ({"feed": 8, "bk": 32, "stages": 8}, "multiple of 64"),
    ({"feed_boxes": True}, "feed > 0"),
    ({"feed": 3}, "feed=3 is not one of"),
])
def test_validate_rejects_what_does_not_fit(bad, phrase):
    reasons = gt.validate(gt.GemmParams(**bad))
    assert any(phrase in r for r in reasons), reasons


def test_the_plan_adds_the_feeders_the_operands_and_an_unzeroed_counter():
    src = gt.render(gt.default_params().model_copy(update={"feed": 8}))
    plan = src[:src.index("*/")]
    assert 'grid = ["min(min(num_sms, 128), cdiv(M, 128) * cdiv(N, 256)) + 4", 1, 1]' in plan
    assert '"i32:K", "A", "B", "scratch:feed_count"]' in plan
    assert '[scratch.feed_count]\ndtype = "int32"\nshape = [1]\nzero = false' in plan
    assert "constexpr int FEED_LEAD = 8;" in src and "constexpr bool FEED_BOXES = false;" in src
    assert "const int step = PERSISTENT ? gridDim.x - FEED_CTAS : cluster_tiles;" in src
    assert src.count("feed_report(feed_count)") == 1  # the producer's, once per k-step
    assert feed.FEED_CTAS == 4


def _tile_coords(tile: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    """The template's grouped tile_coords."""
    group_size = group_m * tiles_n
    first_m = tile // group_size * group_m
    rows = min(tiles_m - first_m, group_m)
    in_group = tile % group_size
    return first_m + in_group % rows, in_group // rows


def _owned(tile: int, start: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[bool, bool]:
    """feed_step's rule: the round's first tile on an A strip / a B strip prefetches it."""
    group_size = group_m * tiles_n
    rows = min(tiles_m - tile // group_size * group_m, group_m)
    in_group = tile % group_size
    return in_group < rows or tile - rows < start, in_group % rows == 0 or tile == start


@pytest.mark.parametrize("tiles_m, tiles_n, ctas, group_m", [
    (64, 28, 128, 16), (64, 28, 128, 8), (32, 16, 128, 16), (2, 2, 4, 16), (7, 5, 128, 8), (9, 13, 20, 4),
    (64, 28, 120, 16), (3, 40, 16, 1)])
def test_every_strip_of_every_round_is_prefetched_and_a_strip_at_most_once_per_group(tiles_m, tiles_n, ctas, group_m):
    """A round (the tiles ctas x r .. ctas x (r + 1) - 1, one per CTA) prefetches every A strip and B strip its tiles
    load. An A strip is prefetched once a round; a B strip once per group of tile rows in the round (a round that
    spans two groups may prefetch a column strip twice, an L2 hit)."""
    tiles = tiles_m * tiles_n
    for start in range(0, tiles, ctas):
        round_tiles = range(start, min(start + ctas, tiles))
        coords = {t: _tile_coords(t, tiles_m, tiles_n, group_m) for t in round_tiles}
        own = {t: _owned(t, start, tiles_m, tiles_n, group_m) for t in round_tiles}
        a_by = [coords[t][0] for t in round_tiles if own[t][0]]
        b_by = [(t // (group_m * tiles_n), coords[t][1]) for t in round_tiles if own[t][1]]
        assert sorted(a_by) == sorted({tm for tm, _ in coords.values()})
        assert len(b_by) == len(set(b_by)) and {tn for _, tn in b_by} == {tn for _, tn in coords.values()}


@pytest.fixture(scope="module")
def compiled() -> dict:
    return compile_points(VARIANTS, MAIN)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_feed_assembles_without_spills(compiled, name):
    k = clean_kernel(compiled[name])
    assert k.registers == 168
    if VARIANTS[name].get("feed_boxes"):
        assert k.sass_opcodes.get("UTMAPF", 0) >= 2  # the feeders' box prefetches (A's and B's)
    else:
        assert k.sass_opcodes.get("CCTL", 0) >= 2  # prefetch.global.L2: a cache-control op per line


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", list(VARIANTS))
def test_feed_matches_torch(compiled, name, shape):
    check_against_torch(name, VARIANTS[name], compiled[name], shape, seed=7, calls=3)
