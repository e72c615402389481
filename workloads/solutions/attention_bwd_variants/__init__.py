"""Variants of the attention backward, as text edits of the checked-in file (attention_bwd_wgmma.cu), so that the
file stays the one copy of the kernel (an edit whose text has moved fails loudly) and the reference's
per-workload plan edits (attention_backward.py) apply to each unchanged. attention_bwd_template.py names them as
points of its parameter space, which builtin/tuner searches.

    variant_text("bulk_dq")               the solution text of a variant (VARIANTS names them all)
    variant_text("st_static+head_groups") a variant, or `checked-in`, in a launch order of ORDERS

README.md (this folder): what each variant changes, what the H200 measured, which module builds it."""
from __future__ import annotations

from .edits import REFERENCE
from .launch_orders import ORDERS
from .registry import VARIANTS, variant_text

__all__ = ["ORDERS", "REFERENCE", "VARIANTS", "variant_text"]
