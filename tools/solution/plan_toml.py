"""Read the `/* ptxbench ... */` plan block of a solution file into a LaunchPlan.

tomllib gives the data but not where it came from, so a light line scan of the same text records
the file line of every table header, key and argument string. Each object in the plan carries its
line, and `KeyLines` answers "on which line is `grid` of the launch at line 12?", so every issue
names the line the model has to fix.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from .expr import ExprError, names
from .plan import Arg, Launch, LaunchPlan, Scratch, TensorMap
from .source_scan import line_of

SCALAR_TYPES = ("i32", "u32", "i64", "u64", "f32", "f64")
DTYPES = ("bfloat16", "float16", "float32", "int32", "int64", "uint8")
SWIZZLES = ("none", "32B", "64B", "128B")
L2_PROMOTIONS = ("none", "64B", "128B", "256B")
OOB_FILLS = ("zero", "nan")
LAUNCH_KEYS = ("kernel", "grid", "block", "cluster", "smem", "args")
TMAP_KEYS = ("tensor", "box", "dims", "strides", "elem_strides", "swizzle", "l2_promotion", "oob_fill")
SCRATCH_KEYS = ("dtype", "shape", "zero")
TOP_KEYS = ("language", "launch", "tmap", "scratch")
# Each scratch buffer and tensor map costs every call of an evaluation its restore and checks, and each launch a
# driver call: a plan with thousands of them would spend the watchdog's time in harness work, not in its kernels.
# Refused here, before each launch's kernel is looked up in the file (thousands of lookups took minutes).
MAX_PLAN_OBJECTS = {"scratch": 64, "tmap": 64, "launch": 64}
_KIND_HINTS = {k: f" (did you mean {v}?)" for k, v in {
    "int": "i32", "int32": "i32", "s32": "i32", "uint": "u32", "uint32": "u32", "unsigned": "u32", "int64": "i64",
    "s64": "i64", "uint64": "u64", "float": "f32", "float32": "f32", "double": "f64", "float64": "f64",
    "ptr": "the bare tensor name", "tensor": "the bare tensor name", "tensormap": "tmap", "buf": "scratch"}.items()}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# tomllib's work on one dotted key grows as the square of its parts (`x.k0.k1...k49999 = 1` took a minute); a plan's
# keys have at most three, and a line of 256 dots (in strings or numbers too) leaves any honest line room.
MAX_LINE_DOTS = 256
PLAN_START = re.compile(r"/\*\s*ptxbench\b")
# One unbounded run, then the closing bracket: linear on a line of `[` and spaces (a lazy group between two `\s*`
# was cubic on it).
_HEADER = re.compile(r"\s*\[\[?([^\]]+)\]\]?")


@dataclass
class KeyLines:
    """File lines of the plan's keys: (line of the owning table header, key) -> line."""

    block_line: int = 0
    keys: dict[tuple[int, str], int] = field(default_factory=dict)
    strings: dict[tuple[int, str], list[int]] = field(default_factory=dict)  # string literals inside an array value
    headers: list[tuple[int, str]] = field(default_factory=list)  # (line, header text such as "launch" or "tmap.A")

    def of(self, owner_line: int, key: str) -> int:
        return self.keys.get((owner_line, key), owner_line or self.block_line)


@dataclass
class PlanBlock:
    text: str  # the TOML text
    first_line: int  # file line of the TOML text's first line


def find_plan_block(source: str) -> PlanBlock | tuple[int, str] | None:
    """The plan's TOML text, (line, error) when the block is never closed, or None (no block)."""
    m = PLAN_START.search(source)
    if not m:
        return None
    end = source.find("*/", m.end())
    if end < 0:
        return line_of(source, m.start()), "the plan block '/* ptxbench' is never closed with '*/'"
    text = source[m.end():end]
    lines = text.split("\n")
    rest = [ln for ln in lines[1:] if ln.strip()]
    if rest and all(re.match(r"\s*\*(?!/)", ln) for ln in rest):  # a ` * ` prefixed comment style
        lines = [lines[0]] + [re.sub(r"^\s*\* ?", "", ln) for ln in lines[1:]]
    return PlanBlock("\n".join(lines), line_of(source, m.start()))


def _scan_lines(block: PlanBlock) -> KeyLines:
    """Record header, key and string-literal lines of the TOML text (strings and comments respected)."""
    kl = KeyLines(block_line=block.first_line)
    owner, depth, key, quote = block.first_line, 0, "", ""
    for offset, raw in enumerate(block.text.split("\n")):
        line = block.first_line + offset
        i = 0
        if depth == 0 and not quote:
            header = _HEADER.match(raw)
            if header:
                owner = line
                kl.headers.append((line, header.group(1).strip().replace('"', "").replace(" ", "")))
                continue
            k = re.match(r"\s*([A-Za-z0-9_\-\.\"']+)\s*=", raw)
            if k:
                key = k.group(1).strip("\"'")
                kl.keys.setdefault((owner, key), line)
                i = k.end()
        while i < len(raw):
            c = raw[i]
            if quote:
                if c == "\\" and quote[0] == '"':  # basic strings, multi-line ones too, have escapes: `\"` ends none
                    i += 1
                elif raw.startswith(quote, i):
                    i += len(quote) - 1
                    quote = ""
            elif c == "#":
                break
            elif c in "\"'":
                quote = c * 3 if raw.startswith(c * 3, i) else c
                i += len(quote) - 1
                if depth > 0:
                    kl.strings.setdefault((owner, key), []).append(line)
            elif c in "[{":
                depth += 1
            elif c in "]}":
                depth = max(0, depth - 1)
            i += 1
        if quote in ("'", '"'):
            quote = ""  # single-line strings never continue
    return kl


def _toml_error(e: tomllib.TOMLDecodeError, block: PlanBlock) -> tuple[int, str]:
    msg = str(e)
    m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
    where = block.first_line + block.text.count("\n")
    if m:
        where = block.first_line + int(m.group(1)) - 1
        msg = msg[:m.start()].strip() + f" (column {m.group(2)})"
    elif "end of document" in msg:
        msg = msg.replace("(at end of document)", "at the end of the plan block").strip()
    hint = ""
    if "Invalid value" in msg or "Invalid initial character" in msg:
        hint = '; expressions must be quoted strings, e.g. grid = ["cdiv(N, 128)", 1, 1], and names must be quoted, e.g. kernel = "gemm"'
    return where, f"the plan is not valid TOML: {msg}{hint}"


class _Builder:
    """Turn the decoded TOML into plan objects, collecting issues instead of stopping at the first."""

    def __init__(self, kl: KeyLines):
        self.kl = kl
        self.issues: list[tuple[int, str]] = []
        # header text -> its lines, in file order: one scan of the headers per table was quadratic in a plan of
        # thousands of tables
        self.header_lines: dict[str, list[int]] = {}
        for ln, h in kl.headers:
            self.header_lines.setdefault(h, []).append(ln)

    def issue(self, line: int, message: str) -> None:
        self.issues.append((line, message))

    def header_line(self, prefix: str, index_or_name: int | str, fallback_key: str) -> int:
        found = self.header_lines.get(prefix, [])
        if isinstance(index_or_name, int):
            if index_or_name < len(found):
                return found[index_or_name]
        elif named := self.header_lines.get(f"{prefix}.{index_or_name}"):
            return named[0]
        elif found:
            return self.kl.of(found[0], index_or_name)
        return self.kl.of(self.kl.block_line, fallback_key)

    def unknown_keys(self, table: dict, allowed: tuple[str, ...], line: int, what: str) -> None:
        for key in table:
            if key not in allowed:
                self.issue(self.kl.of(line, key), f"unknown key '{key}' in {what}; expected one of: {', '.join(allowed)}")

    def expr(self, value: Any, line: int, what: str) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            self.issue(line, f"{what} must be a number or an expression string, got {value!r}")
            return False
        try:
            names(value)
        except ExprError as e:
            self.issue(line, f"{what}: {e}")
            return False
        return True

    def expr_list(self, table: dict, key: str, line: int, lo: int, hi: int, what: str) -> list | None:
        value = table.get(key)
        key_line = self.kl.of(line, key)
        if not isinstance(value, list) or not lo <= len(value) <= hi:
            got = f"{len(value)} entries" if isinstance(value, list) else repr(value)
            self.issue(key_line, f"{key} needs a list of {lo} to {hi} entries ({what}), got {got}")
            return None
        ok = all([self.expr(v, key_line, f"{key}[{i}]") for i, v in enumerate(value)])
        return value if ok else None

    def choice(self, table: dict, key: str, line: int, allowed: tuple[str, ...], default: str | None) -> str | None:
        value = table.get(key, default)
        if value not in allowed:
            self.issue(self.kl.of(line, key), f"{key} must be one of {', '.join(allowed)}, got {value!r}")
            return None
        return value

    def name(self, value: Any, line: int, what: str) -> bool:
        if not isinstance(value, str) or not _IDENT.fullmatch(value):
            self.issue(line, f"{what} must be an identifier (letters, digits, _), got {value!r}")
            return False
        return True

    def arg(self, text: Any, line: int, index: int) -> Arg | None:
        where = f"args[{index}]"
        if not isinstance(text, str):
            self.issue(line, f'{where} must be a string such as "A", "tmap:A_map" or "i32:M", got {text!r}')
            return None
        kind, sep, rest = text.partition(":")
        kind, rest = kind.strip(), rest.strip()
        if not sep:
            if _IDENT.fullmatch(text.strip()):
                return Arg(kind="tensor", ref=text.strip(), line=line)
            self.issue(line, f'{where} = "{text}" is not a tensor name; a scalar needs its type, e.g. "i32:{text}"')
            return None
        if kind in ("scratch", "tmap"):
            return Arg(kind=kind, ref=rest, line=line) if self.name(rest, line, f"{where} ({kind} name)") else None
        if kind in SCALAR_TYPES:
            return Arg(kind="scalar", ref=rest, type=kind, line=line) if self.expr(rest, line, where) else None
        hint = _KIND_HINTS.get(kind.lower(), "")
        self.issue(line, f'{where} = "{text}": unknown kind \'{kind}\'{hint}; expected a tensor name, scratch:NAME, '
                         f"tmap:NAME or {'/'.join(SCALAR_TYPES)}:EXPR")
        return None

    def launch(self, table: Any, index: int) -> Launch | None:
        line = self.header_line("launch", index, "launch")
        if not isinstance(table, dict):
            self.issue(line, f"launch {index + 1} must be a table ([[launch]]), got {table!r}")
            return None
        self.unknown_keys(table, LAUNCH_KEYS, line, "[[launch]]")
        kernel = table.get("kernel")
        ok = self.name(kernel, self.kl.of(line, "kernel"), "kernel (the .entry / __global__ name)")
        grid = self.expr_list(table, "grid", line, 1, 3, "blocks per grid, x first")
        block = self.expr_list(table, "block", line, 1, 3, "threads per block, x first")
        cluster = self.expr_list(table, "cluster", line, 1, 3, "CTAs per cluster") if "cluster" in table else None
        smem = table.get("smem", 0)
        ok &= self.expr(smem, self.kl.of(line, "smem"), "smem")
        raw_args = table.get("args", [])
        if not isinstance(raw_args, list):
            self.issue(self.kl.of(line, "args"), f"args must be a list of strings, got {raw_args!r}")
            raw_args, ok = [], False
        arg_lines = self.kl.strings.get((line, "args"), [])
        args = [self.arg(a, arg_lines[i] if i < len(arg_lines) else self.kl.of(line, "args"), i)
                for i, a in enumerate(raw_args)]
        if not ok or grid is None or block is None or ("cluster" in table and cluster is None) or None in args:
            return None
        return Launch(kernel=kernel, grid=grid, block=block, cluster=cluster, smem=smem, args=args, line=line)

    def tmap(self, name: str, table: Any) -> TensorMap | None:
        line = self.header_line("tmap", name, "tmap")
        if not self.name(name, line, "a tmap name") or not self._is_table(table, line, f"tmap.{name}"):
            return None
        self.unknown_keys(table, TMAP_KEYS, line, f"[tmap.{name}]")
        ok = self.name(table.get("tensor"), self.kl.of(line, "tensor"), f"tmap.{name}.tensor")
        box = self.expr_list(table, "box", line, 1, 5, "box size per dimension, innermost first")
        rank = len(box) if box else None
        optional = {}
        for key, lo in (("dims", 0), ("strides", 1), ("elem_strides", 0)):
            if key in table:
                want = (rank - lo) if rank else 1
                optional[key] = self.expr_list(table, key, line, want, want if rank else 5,
                                               f"rank {rank} needs {want}" if rank else "one per dimension")
                ok &= optional[key] is not None
        swizzle = self.choice(table, "swizzle", line, SWIZZLES, "none")
        l2 = self.choice(table, "l2_promotion", line, L2_PROMOTIONS, "none")
        oob = self.choice(table, "oob_fill", line, OOB_FILLS, "zero")
        if not ok or box is None or None in (swizzle, l2, oob):
            return None
        return TensorMap(name=name, tensor=table["tensor"], box=box, swizzle=swizzle, l2_promotion=l2,
                         oob_fill=oob, line=line, **optional)

    def scratch(self, name: str, table: Any) -> Scratch | None:
        line = self.header_line("scratch", name, "scratch")
        if not self.name(name, line, "a scratch name") or not self._is_table(table, line, f"scratch.{name}"):
            return None
        self.unknown_keys(table, SCRATCH_KEYS, line, f"[scratch.{name}]")
        dtype = self.choice(table, "dtype", line, DTYPES, None)
        shape = self.expr_list(table, "shape", line, 1, 8, "elements per dimension, outermost first")
        zero = table.get("zero", False)
        if not isinstance(zero, bool):
            self.issue(self.kl.of(line, "zero"), f"zero must be true or false, got {zero!r}")
            return None
        if dtype is None or shape is None:
            return None
        return Scratch(name=name, dtype=dtype, shape=shape, zero=zero, line=line)

    def _is_table(self, value: Any, line: int, what: str) -> bool:
        if not isinstance(value, dict):
            self.issue(line, f"[{what}] must be a table, got {value!r}")
        return isinstance(value, dict)


@dataclass
class ParsedPlan:
    language: str | None
    plan: LaunchPlan | None
    lines: KeyLines
    issues: list[tuple[int | None, str]]


def parse_plan_block(source: str) -> ParsedPlan:
    """Find and parse the plan block; `issues` is empty when the plan is well-formed."""
    block = find_plan_block(source)
    empty = KeyLines()
    if block is None:
        hint = " (found '// ptxbench': the plan must be a /* */ comment)" if re.search(r"//\s*ptxbench", source) else ""
        return ParsedPlan(None, None, empty, [(None, "no launch plan: the file needs a '/* ptxbench ... */' "
                                                     f"comment block holding the TOML plan{hint}")])
    if isinstance(block, tuple):
        return ParsedPlan(None, None, empty, [block])
    for offset, line in enumerate(block.text.split("\n")):
        if (dots := line.count(".")) > MAX_LINE_DOTS:  # a key's parts share its line: this bounds every key
            return ParsedPlan(None, None, KeyLines(block_line=block.first_line), [(
                block.first_line + offset, f"this line of the plan holds {dots} dots (at most {MAX_LINE_DOTS}): no key "
                                           "of a plan has that many parts")])
    try:
        doc = tomllib.loads(block.text)
    except tomllib.TOMLDecodeError as e:
        return ParsedPlan(None, None, KeyLines(block_line=block.first_line), [_toml_error(e, block)])
    except ValueError:  # int() of a number past 4,300 digits: tomllib's only error not a TOMLDecodeError
        return ParsedPlan(None, None, KeyLines(block_line=block.first_line),
                          [(block.first_line, "the plan is not valid TOML: a number in it is too long (at most 4300 digits)")])
    except (RecursionError, MemoryError):  # tomllib recurses once per nesting level
        return ParsedPlan(None, None, KeyLines(block_line=block.first_line),
                          [(block.first_line, "the plan is not valid TOML: a value is nested too deeply")])
    kl = _scan_lines(block)
    b = _Builder(kl)
    root = block.first_line
    b.unknown_keys(doc, TOP_KEYS, root, "the plan")
    language = doc.get("language")
    if language not in ("ptx", "cuda"):
        b.issue(kl.of(root, "language"), f'language must be "ptx" or "cuda", got {language!r}'
                if "language" in doc else 'the plan needs language = "ptx" or language = "cuda"')
        language = None
    raw_launches = doc.get("launch")
    if not isinstance(raw_launches, list) or not raw_launches:
        b.issue(kl.of(root, "launch"), "the plan needs at least one [[launch]] table (kernel, grid, block, args)")
        raw_launches = []
    raws = {"launch": raw_launches, "tmap": doc.get("tmap"), "scratch": doc.get("scratch")}
    over = [f"{len(raw)} [[{kind}]] entries; at most {MAX_PLAN_OBJECTS[kind]}" for kind, raw in raws.items()
            if isinstance(raw, (list, dict)) and len(raw) > MAX_PLAN_OBJECTS[kind]]
    if over:
        return ParsedPlan(language, None, kl, b.issues + [(None, f"the plan has {o}") for o in over])
    launches = [b.launch(t, i) for i, t in enumerate(raw_launches)]
    groups = {}
    for key, build in (("tmap", b.tmap), ("scratch", b.scratch)):
        raw = doc.get(key, {})
        if not isinstance(raw, dict):
            b.issue(kl.of(root, key), f"{key} must be tables written [{key}.NAME], got {type(raw).__name__}")
            raw = {}
        groups[key] = [build(name, table) for name, table in raw.items()]
    plan = None
    if not b.issues and None not in launches and None not in groups["tmap"] and None not in groups["scratch"]:
        plan = LaunchPlan(launches=launches, tmaps=groups["tmap"], scratch=groups["scratch"])
    return ParsedPlan(language, plan, kl, b.issues)
