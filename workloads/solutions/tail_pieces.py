"""The last wave in pieces, for the attention backward's tail_split and tail_kernel (attention_bwd_variants/): with one
CTA per SM, `items` equal CTAs on num_sms SMs leave the last wave part idle, so the last `items % num_sms` items are
cut into PIECES CTAs each. Here: the piece count, the plan's 1-D grid, the pieces' arguments and scratch, and the
count-in through which each item's last piece learns it is last. (The forward's tail_split used them too; measured
slower, it was deleted: attention_template.md, round 16.)"""
from __future__ import annotations

PIECES = 5


def tail_grid(items: str, what: str, pieces: int = PIECES) -> str:
    """The plan's grid line: a CTA per item of `items` (a plan expression), the last wave's in `pieces` each."""
    return (f'grid = ["{items} + {items} % num_sms * {pieces - 1}"]  # tail_split: the whole {what}, then the last '
            f"wave's in {pieces} pieces each")


def tail_args(heads: str, pieces: int = PIECES) -> list[str]:
    """The kernel's arguments after its others: the head count `heads` (a plan expression), the SM count, the piece
    count and the two scratch buffers."""
    return [f"i32:{heads}", "i32:num_sms", f"i32:{pieces}", "scratch:tail_part", "scratch:tail_count"]


def tail_scratch(consumer_threads: int, floats: int, what: str) -> str:
    """The scratch tables: each piece's partials (`floats` per consumer thread) and a zeroed counter per cut item."""
    return (f"[scratch.tail_part]  # tail_split: each piece's {what} per consumer thread\n"
            f'dtype = "float32"\nshape = ["num_sms", "{PIECES}", "{consumer_threads}", "{floats}"]\n'
            "\n[scratch.tail_count]  # tail_split: the pieces of each cut item that are done\n"
            'dtype = "int32"\nshape = ["num_sms"]\nzero = true\n')


def count_in(barrier: str, slot: str) -> str:
    """CUDA lines run by every consumer thread once its partials are stored: fence, meet on `barrier` (a statement),
    count the piece in on item `slot`'s counter; every piece but the item's last returns (`last_piece`: a __shared__
    int the caller declares)."""
    return ("      __threadfence();  // the partials are visible before the count says so\n"
            f"      {barrier};  // every consumer thread's partials are out\n"
            f"      if (threadIdx.x == 128) last_piece = atomicAdd(&tail_count[{slot}], 1) == pieces - 1;\n"
            f"      {barrier};  // last_piece is written\n"
            "      if (!last_piece) return;  // the item's last piece merges\n"
            "      __threadfence();\n")
