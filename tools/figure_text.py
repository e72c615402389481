"""A recorded number (a speedup, a time, a share) as text that stays short whatever the record holds.

Records come from other machines and may be edited by hand: a speedup of 1e308 printed with `:.3f` was a
309-digit figure in `score`, and an Infinity or NaN printed as whatever Python's float formatting made of it. Here
a number beyond `LARGE` or (not zero) below `SMALL` is written in scientific notation, and a non-finite one is named.
"""
from __future__ import annotations

import math

LARGE = 1e6
SMALL = 1e-3


def figure(value: float, digits: int = 3) -> str:
    """`value` with `digits` decimals, or in scientific notation (`digits` significant decimals) when it is huge or
    tiny; 'inf', '-inf' or 'nan' when it is no finite number."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if abs(value) >= LARGE or (value != 0 and abs(value) < SMALL and round(value, digits) == 0):
        return f"{value:.{max(digits - 1, 0)}e}"
    return f"{value:.{digits}f}"
