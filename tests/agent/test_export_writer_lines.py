"""JSONL rows stay one line for every reader: the characters str.splitlines() breaks at are escaped."""
from __future__ import annotations

import json

from ptxbench.agent.export.writer import jsonl_line


def test_a_row_with_unicode_line_separators_stays_one_line_and_reads_back_equal():
    row = {"completion": "a\u2028b\u2029c\u0085d é ✓", "n": 1}
    line = jsonl_line(row)
    assert line.endswith("\n") and len(line.splitlines()) == 1  # splitlines() broke the raw row into four lines
    assert json.loads(line) == row
    assert "é ✓" in line  # other text stays UTF-8, not escaped
