"""The launch orders, applied to any variant (`variant_text("X+order")`): head_major (the key blocks of a head side
by side) and head_groups (by groups of 4 heads, key blocks longest-first across the group)."""
from __future__ import annotations

HEAD_MAJOR = [
    ('grid = ["B * H", "cdiv(S, 128)"]',
     'grid = ["cdiv(S, 128)", "B * H"]  # the key blocks of one head side by side: they share its Q, dO, dQ in L2'),
    ("  const int bkv = blockIdx.x;             // batch * KV head\n"
     "  const int kb = blockIdx.y;              // key block: causal blocks with the most query rows come first",
     "  // The key blocks of a head run side by side (blockIdx.x), so its Q / dO rows are read from DRAM about once and\n"
     "  // its fp32 dQ rows take every block's reduce-add in L2; causal: each head's longest key blocks first.\n"
     "  const int kb = blockIdx.x;              // key block\n"
     "  const int bkv = blockIdx.y;             // batch * KV head"),
]


HEAD_GROUPS = [
    ("  // The key blocks of a head run side by side (blockIdx.x), so its Q / dO rows are read from DRAM about once and\n"
     "  // its fp32 dQ rows take every block's reduce-add in L2; causal: each head's longest key blocks first.\n"
     "  const int kb = blockIdx.x;              // key block\n"
     "  const int bkv = blockIdx.y;             // batch * KV head",
     "  // Groups of HEAD_GROUP heads side by side, their key blocks longest-first across the group (blocks are handed\n"
     "  // out in linear order): about one group is in flight, sharing its heads' Q / dO / dQ rows in L2, and causal\n"
     "  // hands out every group's longest key blocks before its shorter ones.\n"
     "  const int n_kb = gridDim.x, lin = blockIdx.x + n_kb * blockIdx.y;\n"
     "  const int grp = lin / (HEAD_GROUP * n_kb), in_grp = lin % (HEAD_GROUP * n_kb);\n"
     "  const int g_heads = min(HEAD_GROUP, static_cast<int>(gridDim.y) - grp * HEAD_GROUP);\n"
     "  const int kb = in_grp / g_heads;        // key block\n"
     "  const int bkv = grp * HEAD_GROUP + in_grp % g_heads;  // batch * KV head"),
    ("template <int HD, bool CAUSAL, bool GQA",  # the main kernel's template (a variant may add parameters)
     "constexpr int HEAD_GROUP = 4;  // heads whose key blocks are in flight together (4 x 32 blocks ~ one wave)\n\n"
     "template <int HD, bool CAUSAL, bool GQA"),
]


# Launch order -> (its edits, applied after the variant's; the header line it adds).
ORDERS: dict[str, tuple[list[tuple[str, str]], str]] = {
    "head_major": (HEAD_MAJOR, "launched with the key blocks of a head side by side"),
    "head_groups": (HEAD_MAJOR + HEAD_GROUPS, "launched by groups of 4 heads, their key blocks longest-first "
                                              "across the group"),
}
