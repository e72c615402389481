"""writer_exit (on writer_all): the writer warp's last wait is for its reductions to have read their tiles, not for
their adds to be done, as the forward's store_wait="read" (attention_template.md round 18).

The writer waits once per CTA, after the last block, for its last two bulk reduce-adds to complete before the CTA may
leave (`cp.async.bulk.wait_group 0`); the SM's next CTA cannot start until then. The tiles only have to be read before
the CTA's shared memory goes (`wait_group.read`), and the grid's end orders the adds before the postprocess launch
reads dQacc, as CUTLASS's epilogues rely on for their TMA stores.
"""
from __future__ import annotations

EXIT = ("      if (issuer) bulk_wait_all();  // the last reductions are done before the CTA leaves\n",
        "      if (issuer) bulk_wait_read();  // writer_exit: the last reductions have read their tiles (the grid's end "
        "orders their adds)\n")
WRITER_EXIT = [EXIT]
