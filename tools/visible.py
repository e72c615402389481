"""Characters that change how text reads without being seen themselves: the bidirectional controls (LRE, RLE, PDF,
LRO, RLO, LRI, RLI, FSI, PDI, the LRM / RLM / ALM marks). A kernel a model wrote can hold them, so that the line a
person reads in a report or a terminal is not the line the compiler reads ("Trojan Source", CVE-2021-42574). Every
place that shows model text to a person writes them as their escapes instead.
"""
from __future__ import annotations

import re

BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def bidi_escaped(text: str) -> str:
    """`text` with each bidirectional control written as its escape (`\\u202e`), so it shows and acts on nothing."""
    return BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
