"""Read Nsight Compute's CSV pages (`ncu --import R --csv --page raw|details|source`) into plain rows.

Three pages, three shapes:
- raw: one row per profiled kernel, one column per metric, a second row with the units; metrics with
  instances (with --print-metric-instances details) read "3,536 (HGMMA: 320; UTMALDG: 8; ...)".
- details: one row per (kernel, section, metric) or per rule result (Rule Name, Estimated Speedup).
- source (--print-source sass): per kernel a `"Kernel Name","k",` line, a header, one row per SASS
  instruction with its executed counts.
Numbers carry thousands separators and, unless --print-units base, scaled units (Kbyte, us): both
are undone here. Missing or NaN values (a newer ncu can return NaN, kernelbot #530) become None.
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field

# Scale of ncu's unit prefixes (decimal: 65.536 Kbyte = 65,536 bytes), per base unit.
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME = {"ns": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3, "s": 1.0, "second": 1.0, "nsecond": 1e-9}
_SCALED = re.compile(r"^(K|M|G|T|P)?(byte|hz|Hz|inst|cycle|sector|request|warp|thread|block|register)(.*)$")
_INSTANCES = re.compile(r"^\s*([-+0-9.,eE]+|n/a|nan|NaN)\s*\((.*)\)?\s*$", re.S)
MISSING = {"", "n/a", "N/A", "no data", "nan", "NaN", "-nan", "(!)", "-"}


def to_number(value: str | None, unit: str = "") -> float | None:
    """'1,310,720' -> 1310720.0; '65.536' with unit 'Kbyte' -> 65536.0; '2.6' 'us' -> 2.6e-6 (seconds).

    Percentages stay percentages. Returns None for a missing, non-numeric or NaN value."""
    if value is None:
        return None
    text = value.strip().split(" (", 1)[0].replace(",", "")
    if text in MISSING:
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    if math.isnan(number) or math.isinf(number):
        return None
    return number * unit_scale(unit)


def unit_scale(unit: str) -> float:
    unit = (unit or "").strip()
    if unit in _TIME:
        return _TIME[unit]
    if "/" in unit:
        num, _, den = unit.partition("/")
        if den in _TIME:  # a rate: 'Gbyte/second', 'cycle/nsecond' (older ncu's SM Frequency)
            return unit_scale(num) / _TIME.get(den, 1.0)
    m = _SCALED.match(unit)
    if m and m.group(1):
        return _PREFIX[m.group(1)]
    if unit.lower() in ("ghz", "mhz", "khz"):
        return {"g": 1e9, "m": 1e6, "k": 1e3}[unit[0].lower()]
    return 1.0


def parse_instances(value: str) -> tuple[float | None, dict[str, float]]:
    """'3,536 (UMOV: 760; HGMMA: 320)' -> (3536.0, {'UMOV': 760.0, 'HGMMA': 320.0}).

    A value without instances gives (total, {}); counts that are NaN are left out."""
    if value is None:
        return None, {}
    m = _INSTANCES.match(value.strip())
    if not m or "(" not in value:
        return to_number(value), {}
    total = to_number(m.group(1))
    inner = value.strip()[value.strip().index("(") + 1:].rstrip(")").strip()
    counts: dict[str, float] = {}
    for part in inner.split(";"):
        if ":" not in part:
            continue
        key, _, num = part.rpartition(":")
        number = to_number(num)
        if number is not None and key.strip():
            counts[key.strip()] = counts.get(key.strip(), 0.0) + number
    return total, counts


def _rows(text: str) -> list[list[str]]:
    """CSV rows, skipping ncu's own '==PROF==' / '==WARNING==' lines and program output before the header."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') or line.startswith('"Kernel Name"')), None)
    if start is None:
        return []
    body = [line for line in lines[start:] if not line.startswith("==")]
    return list(csv.reader(io.StringIO("\n".join(body))))


@dataclass
class RawKernel:
    """One kernel launch of the raw page: metric name -> (unit, value text)."""

    id: int
    name: str
    grid: str = ""
    block: str = ""
    values: dict[str, tuple[str, str]] = field(default_factory=dict)

    def number(self, metric: str) -> float | None:
        unit, value = self.values.get(metric, ("", ""))
        return to_number(value, unit)

    def instances(self, metric: str) -> dict[str, float] | None:
        """Per-instance values of a metric, None when the metric is missing or has no value."""
        if metric not in self.values:
            return None
        total, counts = parse_instances(self.values[metric][1])
        if total is None and not counts:
            return None
        return counts


def parse_raw(text: str) -> list[RawKernel]:
    rows = _rows(text)
    if len(rows) < 2:
        return []
    header = rows[0]
    units = rows[1] if len(rows) > 1 and not (rows[1] and rows[1][0].strip().isdigit()) else [""] * len(header)
    data = rows[2:] if units is rows[1] else rows[1:]
    kernels = []
    for row in data:
        if len(row) < len(header) // 2:
            continue
        values = {h: (u, v) for h, u, v in zip(header, units, row)}
        kernels.append(RawKernel(
            id=int(to_number(values.get("ID", ("", "0"))[1]) or 0), name=values.get("Kernel Name", ("", ""))[1],
            grid=values.get("Grid Size", ("", ""))[1], block=values.get("Block Size", ("", ""))[1], values=values))
    return kernels


@dataclass
class DetailRow:
    section: str
    label: str
    metric: str
    unit: str
    value: str


@dataclass
class RuleRow:
    section: str
    name: str
    type: str  # OPT (an optimisation), INF (information), WRN, ERR
    description: str
    speedup_type: str  # local | global | ''
    speedup_pct: float | None


@dataclass
class DetailKernel:
    id: int
    name: str
    rows: list[DetailRow] = field(default_factory=list)
    rules: list[RuleRow] = field(default_factory=list)

    def value(self, section: str, metric: str, label: str | None = None) -> float | None:
        for r in self.rows:
            if r.section == section and r.metric == metric and (label is None or r.label == label):
                return to_number(r.value, r.unit)
        return None

    def section(self, section: str, label: str | None = None) -> dict[str, float]:
        return {r.metric: v for r in self.rows if r.section == section and (label is None or r.label == label)
                and (v := to_number(r.value, r.unit)) is not None}


def parse_details(text: str) -> list[DetailKernel]:
    rows = _rows(text)
    if not rows:
        return []
    header = rows[0]
    kernels: dict[int, DetailKernel] = {}
    for row in rows[1:]:
        rec = dict(zip(header, row))
        kid = int(to_number(rec.get("ID", "0")) or 0)
        k = kernels.setdefault(kid, DetailKernel(kid, rec.get("Kernel Name", "")))
        if rec.get("Rule Name"):
            k.rules.append(RuleRow(rec.get("Section Name", ""), rec["Rule Name"], rec.get("Rule Type", ""),
                                   rec.get("Rule Description", ""), rec.get("Estimated Speedup Type", ""),
                                   to_number(rec.get("Estimated Speedup", ""))))
        elif rec.get("Metric Name"):
            k.rows.append(DetailRow(rec.get("Section Name", ""), rec.get("Body Item Label", ""), rec["Metric Name"],
                                    rec.get("Metric Unit", ""), rec.get("Metric Value", "")))
    return list(kernels.values())


@dataclass
class SourceLine:
    address: str
    sass: str
    inst_executed: float | None
    thread_inst_executed: float | None
    pred_on_thread_inst_executed: float | None
    samples: float = 0.0  # warp-stall samples at this instruction ("Warp Stall Sampling (All Samples)")
    stalls: dict[str, float] = field(default_factory=dict)  # reason (feedback_profile.md's keys) -> samples

    @property
    def opcode(self) -> str:
        """'@!P0 BRA 0x6b0' -> 'BRA'; 'HGMMA.64x8x16.F32.BF16 R24, ...' -> 'HGMMA'."""
        words = self.sass.split()
        if words and words[0].startswith("@"):
            words = words[1:]
        return words[0].split(".", 1)[0].rstrip(";") if words else ""


@dataclass
class SourceKernel:
    name: str
    lines: list[SourceLine] = field(default_factory=list)

    def opcodes_present(self) -> set[str]:
        return {ln.opcode for ln in self.lines if ln.opcode}


def parse_source(text: str) -> list[SourceKernel]:
    kernels: list[SourceKernel] = []
    header: list[str] | None = None
    for row in _rows(text):
        if not row:
            continue
        if row[0] == "Kernel Name":
            kernels.append(SourceKernel(row[1] if len(row) > 1 else ""))
            header = None
        elif row[0] == "Address":
            header = row
        elif header is not None and kernels:
            rec = dict(zip(header, row))
            stalls = {SOURCE_STALLS.get(c[6:], c[6:]): v for c, cell in rec.items()
                      if c.startswith("stall_") and "(" not in c and (v := to_number(cell))}
            kernels[-1].lines.append(SourceLine(
                rec.get("Address", ""), rec.get("Source", "").strip(), to_number(rec.get("Instructions Executed")),
                to_number(rec.get("Thread Instructions Executed")),
                to_number(rec.get("Predicated-On Thread Instructions Executed")),
                to_number(rec.get("Warp Stall Sampling (All Samples)")) or 0.0, stalls))
    return kernels


# The source page's stall columns (stall_long_sb) -> the reasons of the WarpStateStats section (long_scoreboard).
SOURCE_STALLS = {"long_sb": "long_scoreboard", "short_sb": "short_scoreboard", "mio": "mio_throttle", "lg": "lg_throttle",
                 "math": "math_pipe_throttle", "tex": "tex_throttle", "no_inst": "no_instruction", "imc": "imc_miss",
                 "dispatch": "dispatch_stall", "sleep": "sleeping"}
