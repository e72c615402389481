"""What the kernel templates (gemm_template.py, attention_template.py) share in building a point's text and record:
an option's code spliced into the template body by exact text edits that fail loudly when the body has moved, and a
point's dump that leaves out the options still at their defaults (so a point rendered and recorded before an option
existed keeps its text and key)."""
from __future__ import annotations

from typing import Any, Iterable

from pydantic import BaseModel


def replace_counted(text: str, old: str, new: str, where: str, count: int = 1) -> str:
    """`text` with `old` (which must occur exactly `count` times) replaced by `new`; `where` names the text in errors."""
    if text.count(old) != count:
        raise ValueError(f"{where} changed: expected {count} x {old!r}, found {text.count(old)}")
    return text.replace(old, new)


def uniform_index_edit(var: str, only_if: str = "") -> tuple[str, str]:
    """The text edit that makes a kernel's consumer index `var` (declared `const int var = wg - 1;`) warp-uniform to
    ptxas: broadcast from lane 0, as CUTLASS's canonical_warp_group_idx does. threadIdx-derived values are not
    uniform to it, so each k-step's wgmma descriptor that depends on the index is otherwise a 64-bit add in ordinary
    registers and two R2UR before its HGMMA; with the broadcast it is built in uniform registers. `only_if`: a
    compile-time condition (a template parameter's test) outside which the plain index stays."""
    shfl = "__shfl_sync(0xffffffffu, wg - 1, 0)"
    value = f"{only_if} ? {shfl} : wg - 1" if only_if else shfl
    return (f"    const int {var} = wg - 1;\n",
            f"    const int {var} = {value};  // warp-uniform to ptxas: descriptors in uniform registers\n")


def without_default_options(model: BaseModel, data: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """A model's dump `data` without the fields `names` that still hold their defaults."""
    for name in names:
        if data.get(name) == type(model).model_fields[name].default:
            del data[name]
    return data
