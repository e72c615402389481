"""Module data stays within its own bytes: how a kernel may name its module's `.global` and `.const` variables.

The driver packs every module's globals and constants into one pool, 256-byte aligned, and registers each variable
as a range of its own (bench/results/run32 and run33, an H100): the bytes past a module's last variable belong to no
symbol, so no reset reaches them, and a kernel holding a variable's address reaches them with an offset.
tests/data/cheats/attacks/global_tail_stash.cu kept every output 64 KiB past its one global and timed 11.4x faster
than its own no-hit twin. A result is kept only by writing it, so what is bounded is every write that an address of
module data reaches:

- a `.global` variable is written only as `[name]` or `[name+offset]`, or through a register that a `mov` of it
  defines and only constant steps carry (`add` of a number, `cvta.global`: nvcc's `atomicAdd(&counter, 1)` and
  `atomicOr(&flags[1], 1)`), the access within its bytes (a counter's atomics, a flag's stores);
- an address computed from module data any other way (a run-time index) may be read through (a lookup table, nvcc's
  `__cudart_sin_cos_coeffs`), never written through, stored, or passed to a call, where it could be offset anywhere;
- no constant's address becomes a generic one (`cvta.const`), and no module variable's initialiser holds an address;
- an address is used only as one (address_use.py): its bits tested under a guard or looked up in a table came back as
  a number the flow below no longer followed.

An array a kernel writes at a run-time index belongs in a scratch buffer of the launch plan, which the protocol owns. The check
reads the PTX ptxas assembles (nvcc's, for a `cuda` solution), comments blanked; pure text, no GPU. Linear in the
text: a module without module data costs one pass over its statements (0.11 s for the attention backward's 1.5 MB of
PTX), one full of module data accesses about 0.4 s per MB.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Callable

from .results import CompileIssue

_IDENT = r"[A-Za-z_$%][\w$]*"
_REGISTER = re.compile(r"%[\w$]+")
_DECL = re.compile(r"^(?:\.(?:visible|weak|extern|common)\s*)*\.(global|const)\b(.*)$", re.S)
_TYPE_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4,
               "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16}
_OPAQUE = {"texref", "samplerref", "surfref"}  # handles, not bytes a kernel addresses
_NUMBER = re.compile(r"^(?:0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)[uU]?$")


def _int(literal: str) -> int:
    """A PTX integer literal (`_NUMBER`): hexadecimal, binary, octal with a leading 0 (`010` is 8), decimal."""
    text = literal.rstrip("uU")
    if len(text) > 70:  # past any 64-bit literal (ptxas refuses it); Python's int() refuses 4,300 digits and more
        return 1 << 64
    if text[:2] in ("0x", "0X", "0b", "0B"):
        return int(text, 0)
    try:
        return int(text, 8) if len(text) > 1 and text[0] == "0" else int(text)
    except ValueError:  # `09`: no octal; ptxas refuses it, the check reads it as written
        return int(text)
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_WIDTH_BY_FAMILY = {"mbarrier": 8, "tensormap": 128, "prefetch": 1, "prefetchu": 1, "applypriority": 1,
                    "discard": 128}

FIX = ("keep an array the kernel indexes at run time in a scratch buffer of the launch plan (`[scratch.NAME]`, "
       "passed as an argument), which every call starts from as the plan says")


@dataclass(frozen=True)
class ModuleVariable:
    name: str
    space: str  # "global" or "const"
    size: int | None  # bytes, None when the declaration does not say (an unsized array without initialiser)


class _Lines:
    """1-based line of an offset in `code`, by bisection over the newlines' offsets (linear in the text overall)."""

    def __init__(self, code: str):
        self.newlines = [m.start() for m in re.finditer("\n", code)]

    def at(self, offset: int) -> int:
        return bisect.bisect_left(self.newlines, offset) + 1


def _split_top(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` outside brackets, braces and parentheses."""
    if not any(c in text for c in "[{("):
        return text.split(sep)
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


_DELIMS = re.compile(r"[{};]")


def statements(code: str, blocks: list | None = None) -> list[tuple[int, str, int]]:
    """(offset, text, function: its index, -1 at module scope) of every `;`-ended statement. At module scope a `{` after
    `=` opens an initialiser and any other opens a function's body (its header ending there); in a body a `{` where a
    statement starts (or after its labels) opens a block, and one within a statement is its operand list
    (`{%r1, %r2}`). Linear: only the delimiters are visited. `blocks`, when given, receives (offset, +1 / -1) for
    each function body and block opened and closed (the scopes of `.reg` declarations)."""
    out: list[tuple[int, str, int]] = []
    depth = inner = 0  # body braces; braces within one statement (an initialiser, a vector operand)
    function = -1
    start = 0
    for m in _DELIMS.finditer(code):
        i, ch = m.start(), m.group(0)
        if inner:
            inner += {"{": 1, "}": -1}.get(ch, 0)
            continue
        if ch == "{":
            pending = code[start:i]
            before = pending.rstrip()[-1:]
            opens_block = (before != "=") if depth == 0 else not _without_labels(pending)[1].strip()
            if not opens_block:
                inner = 1
                continue
            out.append((start, pending, function if depth else -1))
            if depth == 0:
                function += 1
            depth += 1
            if blocks is not None:
                blocks.append((i, 1))
        elif ch == "}":
            out.append((start, code[start:i], function if depth else -1))
            if blocks is not None and depth:
                blocks.append((i, -1))
            depth = max(0, depth - 1)
        else:
            out.append((start, code[start:i], function if depth else -1))
        start = i + 1
    out.append((start, code[start:], function if depth else -1))
    return [(o, t, f) for o, t, f in out if t.strip()]


# The directives that end without `;`, each by its own grammar: what follows one on its line is the next statement, as
# ptxas reads it (`.loc 1 1 0 st.global ...;` is a store).
_NO_SEMICOLON = (r"\.loc\s+\d+\s+\d+\s+\d+(?:\s*,\s*function_name\s+[\w$]+(?:\s*\+\s*\d+)?)?"
                 r"(?:\s*,\s*inlined_at\s+\d+\s+\d+\s+\d+)?"
                 r'|\.file\s+\d+\s+"[^"\n]*"(?:\s*,\s*\d+\s*,\s*\d+)?'
                 r"|\.version\s+\d+\.\d+|\.target\s+\w+(?:\s*,\s*\w+)*|\.address_size\s+\d+|\.section\s+[.\w$]+")
_LEAD = re.compile(rf"\s*(?:{_IDENT}\s*:(?!:)\s*|(?:{_NO_SEMICOLON})\s*)*")


def _without_labels(text: str) -> tuple[int, str]:
    """A statement less what may precede it without a `;` (labels, `.loc` / `.file` lines, the module's header
    directives) and the offset of what is left."""
    m = _LEAD.match(text)
    return m.end(), text[m.end():]


# PTX's hexadecimal floats (`0f3F800000`, nvcc's `__device__ float x = 1.0f;`) and decimal ones: numbers, whose
# letters are no name an initialiser holds
_FLOAT_LITERAL = re.compile(r"(?<![\w$])(?:0[fFdD][0-9a-fA-F]+|\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)")
_INIT_NAME = re.compile(rf"(?<![\w$%.]){_IDENT}")


def _declared_size(type_name: str, vector: int, dims: str, init: str | None) -> int | None:
    unit = _TYPE_BYTES.get(type_name)
    if unit is None:
        return None
    count = 1
    for d in re.findall(r"\[\s*(\w*)\s*\]", dims):
        if d and _NUMBER.match(d):
            count *= _int(d)  # as ptxas reads it: `[0200000]` is octal, 65,536
        elif d:
            return None
        elif init is not None:  # `a[] = {...}`: as many as the initialiser's outer list holds
            body = init.strip()
            body = body[1:-1] if body.startswith("{") and body.endswith("}") else body
            count *= max(1, len(_split_top(body)))
        else:
            return None
    return unit * vector * count


def declarations(code: str, parsed: list | None = None) -> tuple[list[ModuleVariable], list[CompileIssue]]:
    """The module's `.global` / `.const` variables (at module scope or inside a function), and an issue for every
    initialiser that names a symbol (an address the kernel would read back)."""
    variables, issues = [], []
    lines = _Lines(code)
    for offset, text, _ in parsed if parsed is not None else statements(code):
        skip, rest = _without_labels(text)
        m = _DECL.match(rest.strip())
        if not m:
            continue
        space, tail = m.group(1), m.group(2)
        line = lines.at(offset + skip + (len(rest) - len(rest.lstrip())))
        head = re.match(r"\s*((?:\.(?:attribute\([^)]*\)|align\s+\d+|\w+)\s*)*?)"  # one way to read each qualifier
                        r"\.(\w+)\s+(?=[A-Za-z_$%])", tail)
        if not head:
            continue
        type_name = head.group(2)
        if type_name in _OPAQUE:
            continue
        vec = re.search(r"\.v([248])\b", head.group(1))
        for item in _split_top(tail[head.end():]):
            d = re.match(rf"\s*({_IDENT})\s*((?:\[\s*(?:\w+\s*)?\]\s*)*)(?:=(.*))?$", item, re.S)  # one way per blank
            if not d:
                continue
            name, dims, init = d.group(1), d.group(2), d.group(3)
            variables.append(ModuleVariable(name, space, _declared_size(type_name, int(vec.group(1)) if vec else 1,
                                                                        dims, init)))
            named = [t for t in _INIT_NAME.findall(_FLOAT_LITERAL.sub(" ", init or "")) if not _NUMBER.match(t)]
            if named:
                issues.append(CompileIssue(line=line, message=(
                    f"the initialiser of module variable {name} names {named[0]}: an address kept in module data is a "
                    f"pointer into the driver's pool of module data, whose bytes past each variable no reset reaches; "
                    f"initialise module variables with numbers only")))
    return variables, issues


_WORD = re.compile(r"(?<![\w$%.])([A-Za-z_$][\w$]*)")
# a parameter declared in a signature or a call's block: `.param .align 128 .b8 NAME[128]`, `.param .u64 NAME`
_PARAM = re.compile(r"(?<=[\s(,])\.param(?:\s+(?:\.[\w:]+|\d+)){0,8}\s+([A-Za-z_$][\w$]*)")  # bounded: linear
_REG_DECL = re.compile(r"\.reg\b((?:\s*\.\w+)*)\s+(.*)$", re.S)


class _Unprefixed:
    """The registers a module declares without `%` (`.reg .b64 state;`, CUTLASS's and ptxbench/mbarrier.cuh's inline
    asm; PTX allows it): names, and the prefixes of ranges (`x<4>`: x0 .. x3). The checks read a register as `%name`,
    so instructions() writes these with `%` in the operands it hands them: an address `cvta.param` put in `pa` was
    otherwise never followed, and a store through `[pa+65536]` went unchecked
    (tests/data/cheats/attacks/unnamed_register_param_store.cu)."""

    def __init__(self, parsed: list):
        self.declared = _Names()
        for _, text, _ in parsed:
            for name, is_range in _declared(_without_labels(text)[1].strip(), predicates=True):
                if not name.startswith("%"):
                    self.declared.add(name, is_range)

    def __bool__(self) -> bool:
        return bool(self.declared.names or self.declared.ranges)

    def __contains__(self, word: str) -> bool:
        return self.declared.overlaps(word, False)

    def prefixed(self, operands: str) -> str:
        return _WORD.sub(lambda m: "%" + m.group(1) if m.group(1) in self else m.group(1), operands)


_SIGNATURE = re.compile(r"\.(?:entry|func|callprototype)\b[^{;]*")  # a header to its body or its `;`: each once


class _Names:
    """Register names and ranges (`%rd<16>`: %rd0 .. %rd15) as sets, with what overlaps what: linear however many."""

    def __init__(self):
        self.names: set[str] = set()
        self.ranges: set[str] = set()
        self.name_stems: set[str] = set()  # each name less 1..10 trailing digits: the ranges it falls in
        self.range_stems: set[str] = set()

    @staticmethod
    def stems(word: str) -> list[str]:
        digits = min(len(word) - len(word.rstrip("0123456789")), 10)
        return [word[:-k] for k in range(1, digits + 1)]

    def add(self, name: str, is_range: bool) -> None:
        if is_range:
            self.ranges.add(name)
            self.range_stems.update(self.stems(name))
        else:
            self.names.add(name)
            self.name_stems.update(self.stems(name))

    def overlaps(self, name: str, is_range: bool) -> bool:
        stems = self.stems(name)
        if is_range:  # r<N> against a name r7, a range r<M>, r1<M> (r10..) or a range it falls in
            return (name in self.name_stems or name in self.ranges or name in self.range_stems
                    or any(s in self.ranges for s in stems))
        return name in self.names or any(s in self.ranges for s in stems)


def _declared(text: str, predicates: bool = False) -> list[tuple[str, bool]]:
    """(name with its `%` or without, whether a range) of a `.reg` statement's registers; [] for any other, and for
    predicates, which hold no address's bit (comparisons of one are refused): the pack's and CUTLASS's `.reg .pred p;`
    in a block, beside nvcc's `%p<N>`, is harmless however the checks name it."""
    m = _REG_DECL.match(text)
    if m and ".pred" in m.group(1).split() and not predicates:
        return []
    out = []
    for item in _split_top(m.group(2)) if m else ():
        d = re.match(r"\s*([^\s<\[=]+)\s*(<)?", item)
        if d:
            out.append((d.group(1), bool(d.group(2))))
    return out


class _Scopes:
    """A register a block declares under a name an enclosing scope declares is another register to ptxas (nvcc's own
    double-precision `sin` reduces in blocks of `.reg .u32 %r0, %r1, ...` beside the function's `%r<38>`), and to the
    flow it was the same: `{ .reg .b64 %rd1; mov.u64 %rd1, 0; }` ended its following of the outer `%rd1`, which still
    held a module variable's address after the block. Each such register is given a name of its own within its block
    (`%rd1ʹ3`: ptxas takes no such name, so none clashes) in the operands the checks read."""

    MARK = "\u02b9"  # MODIFIER LETTER PRIME: a word character to the checks' patterns, never one of a PTX name

    def __init__(self, parsed: list, blocks: list):
        self.aliases: dict[int, list[tuple[_Names, str]]] = {}  # statement offset -> the renaming scopes around it
        events = sorted([(o, 0, t) for o, t, f in parsed if f >= 0] + [(o, d, "") for o, d in blocks])
        stack: list[tuple[_Names, str]] = []  # (names declared, suffix when they shadow: "" otherwise)
        count = 0
        for offset, delta, text in events:
            if delta == 1:
                stack.append((_Names(), ""))
            elif delta == -1:
                if stack:
                    stack.pop()
            elif stack:
                declared = [(n if n.startswith("%") else "%" + n, r) for n, r in _declared(_without_labels(text)[1]
                                                                                            .strip(), True)]
                if declared:
                    names, suffix = stack[-1]
                    if not suffix and any(s.overlaps(n, r) for s, _ in stack[:-1] for n, r in declared):
                        count += 1
                        suffix = f"{self.MARK}{count}"
                        stack[-1] = (names, suffix)
                    for n, r in declared:
                        names.add(n, r)
                elif any(suffix for _, suffix in stack):
                    self.aliases[offset] = list(stack)

    def rename(self, offset: int, operands: str) -> str:
        stack = self.aliases.get(offset)
        if not stack:
            return operands

        def one(m: re.Match) -> str:
            reg = m.group()
            for names, suffix in reversed(stack):
                if names.overlaps(reg, False):
                    return reg + suffix
            return reg

        return _REGISTER.sub(one, operands)


def register_clashes(data: "ModuleData", language: str,
                     to_source: Callable[[int], tuple[int | None, str]] | None = None) -> list[CompileIssue]:
    """A register declared without `%` (read as `%name`: _Unprefixed) whose `%` name the module also declares (`x` and
    `%x`, `rd<4>` and nvcc's `%rd1`: two registers to ptxas, one to the checks, so a definition of one ended their
    following of an address the other held), or that is also a module variable's, parameter's, function's or label's
    name (which it would hide from them). Predicates are left out: they hold no address's bit. Also a `.reg` in a
    function's signature (`.func (.reg .b64 %ret) f(.reg .b64 %a)`): an address handed in or out that way was never
    followed; nvcc's functions take and return `.param`."""
    lines = _Lines(data.code)
    percent, plain = _Names(), _Names()
    plain_at: dict[str, int] = {}
    for offset, text, function in data.parsed:
        if function < 0 or ".reg" not in text:
            continue
        skip, stmt = _without_labels(text)
        for name, is_range in _declared(stmt.strip()):
            if name.startswith("%"):
                percent.add(name[1:], is_range)
            else:
                plain.add(name, is_range)
                plain_at.setdefault(name, lines.at(offset + skip + len(stmt) - len(stmt.lstrip())))
    clash = sorted(n for n in plain_at if percent.overlaps(n, n not in plain.names))
    if clash:
        return [_located(plain_at[clash[0]], f"register {clash[0]} is declared without `%` beside a register "
                                             f"`%{clash[0]}`: the checks of addresses read `{clash[0]}` as "
                                             f"`%{clash[0]}`, ptxas as another register; name registers `%name`",
                         language, to_source)]
    for m in _SIGNATURE.finditer(data.code):
        if ".reg" in m.group():
            return [_located(data.code.count("\n", 0, m.start()) + 1, "a function's parameters and return values are "
                             "`.param`, not `.reg`: the checks of addresses follow an address into a function and out of "
                             "it only through `.param` (`st.param` before a call, `ld.param` in the callee)", language,
                             to_source)]
    if not plain_at:
        return []
    unprefixed = _Unprefixed(data.parsed)
    symbols = {v.name for v in data.variables}
    symbols |= set(re.findall(r"\.(?:entry|func)\s*(?:\([^()]*\))?\s*([A-Za-z_$][\w$]*)", data.code))
    symbols |= set(_PARAM.findall(data.code))
    symbols |= {label for ins in data.instructions for label in ins.labels}
    clash = sorted(n for n in symbols if n in unprefixed)
    if not clash:
        return []
    where = next((at for n, at in plain_at.items() if n == clash[0] or n in _Names.stems(clash[0])), None)
    message = (f"register {clash[0]} is declared without `%` and shares its name with a symbol or label of the module: "
               f"the checks of addresses read such a register as `%{clash[0]}`, which would hide the symbol; name "
               f"registers `%name`, or give it a name of its own")
    return [_located(where, message, language, to_source) if where else CompileIssue(message=message)]


def _width(opcode: str, operands: str) -> int | None:
    """Bytes an instruction moves at its memory operand: the vector times the type, a copy's size operand, a family's
    fixed width; None for a copy whose size is a register (not known before it runs)."""
    parts = opcode.split(".")
    if parts[0] in _WIDTH_BY_FAMILY:
        return _WIDTH_BY_FAMILY[parts[0]]
    if parts[0] == "cp":
        size = next((o.strip() for o in _split_top(operands) if "[" not in o and o.strip()), "")
        return _int(size) if _NUMBER.match(size) else None
    vec = next((int(p[1:]) for p in parts if p in ("v2", "v4", "v8")), 1)
    unit = next((_TYPE_BYTES[p] for p in reversed(parts) if p in _TYPE_BYTES), 1)
    return vec * unit


_FIRST_REGISTER = re.compile(r"\s*(%[\w$]+)\s*(?:,|$)")


# Instruction families whose bracketed operand is only read (the loaded value is data, not an address), and those
# whose bracketed operand (the first, for a copy) is written: anything else that names module data is treated as a write.
_READS = {"ld", "ldu", "prefetch", "prefetchu", "applypriority"}
_STORES_VALUES = {"st", "atom", "red", "multimem", "tensormap", "mbarrier", "discard", "sust", "sured", "call", "cp",
                  "stmatrix", "shfl"}


@dataclass(frozen=True)
class Instruction:
    line: int
    opcode: str
    operands: str
    function: int
    family: str  # the opcode's first part: ld, st, atom, mov, cp, ...
    dest: str | None  # the register it writes first (its first operand, when that is a register and not an address)
    dests: tuple[str, ...] = ()  # every register it writes: `dest`, or those of a leading `{...}` (`mov.b64 {%r1, %r2}`)
    labels: tuple[str, ...] = ()  # the labels that name it (a branch's targets)
    guarded: bool = False  # `@%p`: it may not run


_LABEL = re.compile(rf"(?<![\w$%])({_IDENT})\s*:(?!:)")  # from a name's start only: linear in a long word
# `@%p`, `@!%p`, `@ ! %p` (ptxas takes the spaces), the opcode, its operands
_INSTRUCTION = re.compile(r"(@\s*!?\s*%?[\w$]+\s+)?([a-z][\w.:]*)\s*(.*)$", re.S)
# families whose first operand is read, not written: `stackrestore.u64 %rd1` taken for a definition ended the flow's
# following of an address it still held
_READS_FIRST = {"stackrestore", "bar", "barrier", "nanosleep", "pmevent"}
_LEADING_BRACE = re.compile(r"\s*\{([^{}]*)\}")


def instructions(code: str, parsed: list | None = None, blocks: list | None = None) -> list[Instruction]:
    """Every instruction in a function body, its guard dropped, with its line, the registers it writes and the labels
    that name it (a label with no instruction after it in its block names the next one of the function); a register
    declared without `%` is written `%name` in its operands (_Unprefixed), and one a block declares over an enclosing
    scope's name is given a name of its own (_Scopes; `blocks`: statements()'s, without them no block is read)."""
    out = []
    lines = _Lines(code)
    labels: list[str] = []
    last_function = -1
    if parsed is None:
        blocks = []
        parsed = statements(code, blocks)
    unprefixed = _Unprefixed(parsed)
    scopes = _Scopes(parsed, blocks or [])
    for offset, text, function in parsed:
        if function != last_function:
            labels, last_function = [], function
        skip, stmt = _without_labels(text)
        labels += _LABEL.findall(text[:skip])
        body = stmt.strip()
        if function < 0 or not body or _DECL.match(body):
            continue
        m = _INSTRUCTION.match(body)
        if m:
            line = lines.at(offset + skip + len(stmt) - len(stmt.lstrip()))
            opcode, operands = m.group(2), m.group(3)
            if unprefixed:
                operands = unprefixed.prefixed(operands)
            operands = scopes.rename(offset, operands)
            family = opcode.split(".")[0]
            first = None if family in _READS_FIRST else _FIRST_REGISTER.match(operands)
            dest = first.group(1) if first else None
            brace = None if first or family in _STORES_VALUES else _LEADING_BRACE.match(operands)
            dests = (dest,) if dest else tuple(_REGISTER.findall(brace.group(1))) if brace else ()
            out.append(Instruction(line, opcode, operands, function, family, dest, dests, tuple(labels),
                                   m.group(1) is not None))
            labels = []
    return out


def symbols_pattern(names) -> re.Pattern:
    """A pattern finding any of `names` as a whole symbol (the longest first; never inside a register, a directive or
    a longer name); one that finds nothing for none."""
    if not names:
        return re.compile(r"(?!)")
    return re.compile(r"(?<![\w$%.])(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
                      + r")(?![\w$])")


def after_written(ins: Instruction) -> str:
    """The operand text past the registers an instruction writes (its `dest`, or its leading `{...}`)."""
    ops = ins.operands
    if ins.dest is not None:
        return ops[ops.index(ins.dest) + len(ins.dest):]
    if ins.dests:
        return ops[ops.index("}") + 1:]
    return ops


_MEM = re.compile(rf"\[\s*({_IDENT})\s*(?:([+-])\s*(0[xX][0-9a-fA-F]+|0[bB][01]+|\d+[uU]?))?\s*\]")


def _located(line: int, message: str, language: str, to_source) -> CompileIssue:
    """An issue at a PTX line, as the model reads it: that line for `ptx`; for `cuda`, the source line nvcc's `.loc`
    names, with the generated PTX quoted."""
    if language == "ptx" or to_source is None:
        return CompileIssue(line=line, message=message)
    where, quoted = to_source(line)
    return CompileIssue(line=where, message=message + quoted)


class _Findings:
    """Issues, one per (variable, kind) at its first line, with how many more places there are."""

    def __init__(self):
        self.first: dict[tuple[str, str], tuple[int, str]] = {}
        self.more: dict[tuple[str, str], int] = {}

    def add(self, var: str, kind: str, line: int, message: str) -> None:
        key = (var, kind)
        if key in self.first:
            self.more[key] = self.more.get(key, 0) + 1
        else:
            self.first[key] = (line, message)

    def issues(self, language: str, to_source) -> list[CompileIssue]:
        out = []
        for key, (line, message) in sorted(self.first.items(), key=lambda kv: kv[1][0]):
            if n := self.more.get(key):
                message += f" (and {n} more place{'s' if n > 1 else ''})"
            out.append(_located(line, message, language, to_source))
        return out


_ADDRESS_STEP = re.compile(r"(mov|add|sub|cvta(?:\.to)?\.global)\.[\w.]*$")


def _derivation(ins: Instruction, by_name: dict, holders: dict) -> tuple[str, tuple[ModuleVariable, int]] | None:
    """(register, (variable, offset)) when `ins` writes a `.global` variable's address plus a constant into a register:
    `mov %r, var`, `mov %r, %held`, `add %r, %held, imm` (either order), `sub %r, %held, imm`, `cvta.global` /
    `cvta.to.global %r, %held` (the same number); None for any other instruction."""
    m = _ADDRESS_STEP.match(ins.opcode)
    if not m:
        return None
    ops = [o.strip() for o in _split_top(ins.operands)]
    if not ops or not re.fullmatch(r"%[\w$]+", ops[0]):
        return None
    dest, srcs, kind = ops[0], ops[1:], m.group(1)
    if kind in ("mov",) or kind.startswith("cvta"):
        if len(srcs) != 1:
            return None
        if srcs[0] in by_name and kind == "mov":
            var = by_name[srcs[0]]
            return (dest, (var, 0)) if var.space == "global" else None
        held = holders.get((ins.function, srcs[0]))
        return (dest, held) if held is not None else None
    if len(srcs) != 2:
        return None
    for a, b in ((0, 1), (1, 0)) if kind == "add" else ((0, 1),):
        held = holders.get((ins.function, srcs[a]))
        if held is not None and _NUMBER.match(srcs[b].lstrip("-")):
            step = _int(srcs[b].lstrip("-")) * (-1 if srcs[b].startswith("-") else 1)
            return dest, (held[0], held[1] + (step if kind == "add" else -step))
    return None


def _address_holders(code_ins: list[Instruction], by_name: dict) -> dict:
    """(function, register) -> (variable, offset) for every register that holds a `.global` variable's address plus a
    known constant, by every one of its definitions (a register also defined any other way holds none)."""
    holders: dict = {}
    defs: dict = {}
    for ins in code_ins:
        if ins.dest is not None:
            defs.setdefault((ins.function, ins.dest), []).append(ins)
    for _ in range(16):  # each pass follows one more step of a chain
        changed = False
        for key, ins_list in defs.items():
            values = {(_derivation(i, by_name, holders) or (None, None))[1] for i in ins_list}
            value = values.pop() if len(values) == 1 else None
            if value is not None and holders.get(key) != value:
                holders[key], changed = value, True
        if not changed:
            break
    return holders


class ModuleData:
    """One module's text read once (statements, declarations): `reach` before ptxas, `unread` with the cubin after."""

    def __init__(self, code: str):
        self.code = code
        self.blocks: list[tuple[int, int]] = []
        self.parsed = statements(code, self.blocks)
        self.variables, self.initialisers = declarations(code, self.parsed)
        self._instructions: list[Instruction] | None = None

    @property
    def instructions(self) -> list[Instruction]:
        """Every instruction of the module's function bodies, read on first use (the checks of module data and of
        parameters share them)."""
        if self._instructions is None:
            self._instructions = instructions(self.code, self.parsed, self.blocks)
        return self._instructions

    def reach(self, language: str, to_source: Callable[[int], tuple[int | None, str]] | None = None) -> list[CompileIssue]:
        return _reach(self, language, to_source)

    def unread(self, symbols: list[str]) -> list[CompileIssue]:
        return _unread(self, symbols)

    def oversized(self, sizes: list[tuple[str, int]]) -> list[CompileIssue]:
        """A variable whose size the check read larger than the cubin's symbol holds (`sizes`: name, bytes): its
        bounds were judged against bytes that lie past it, in the driver's pool of module data."""
        read = {v.name: v.size for v in self.variables}
        for name, size in sizes:
            m = _FUNCTION_SCOPE.match(name)
            declared = read.get(name, read.get(m.group(1)) if m else None)
            if declared is not None and declared > size:
                return [CompileIssue(message=f"module variable {name} holds {size} bytes, and the check of module data "
                                             f"read {declared} from its declaration: declare it as `.b8 {name}[{size}]` "
                                             f"in decimal, its initialiser one list")]
        return []

    def unreadable(self, language: str,
                   to_source: Callable[[int], tuple[int | None, str]] | None = None) -> list[CompileIssue]:
        """A statement in a function body that the checks cannot read as an instruction, a declaration or a directive:
        skipped, it would be a write no check saw (`@ %p1 st...` before the guard's spaces were read)."""
        lines = _Lines(self.code)
        for offset, text, function in self.parsed:
            skip, stmt = _without_labels(text)
            body = stmt.strip()
            if function < 0 or not body or body.startswith(".") or _INSTRUCTION.match(body):
                continue
            line = lines.at(offset + skip + len(stmt) - len(stmt.lstrip()))
            return [_located(line, f"`{body[:60]}` is no instruction the checks of addresses can read: write it as "
                                   f"`[@[!]%p] opcode operands;`", language, to_source)]
        return []

    def register_clashes(self, language: str,
                         to_source: Callable[[int], tuple[int | None, str]] | None = None) -> list[CompileIssue]:
        return register_clashes(self, language, to_source)


def module_data_reach(code: str, language: str,
                      to_source: Callable[[int], tuple[int | None, str]] | None = None) -> list[CompileIssue]:
    """ModuleData(code).reach(...): see _reach."""
    return ModuleData(code).reach(language, to_source)


def _reach(data: ModuleData, language: str,
           to_source: Callable[[int], tuple[int | None, str]] | None = None) -> list[CompileIssue]:
    """Every place the PTX lets a module variable's address out of its bytes, each with its line (the model's own
    for `ptx`; for `cuda`, the source line nvcc's `.loc` names, and the generated PTX quoted).

    nvcc writes `atomicAdd(&counter, 1)` as `mov.u64 %rd1, counter; atom.global.add.u32 %r1, [%rd1], 1`: a register
    that a `mov` of a `.global` variable defines (its only definition in the function) and only constant steps carry
    counts as the variable named directly, so the write is checked against the variable's bytes. Any register computed
    from a module variable's address is followed along the control flow (ptx_flow.py): loads through it are reads, every write through it,
    store of it or call with it lets the address out."""
    variables = data.variables
    issues = [_located(i.line, i.message, language, to_source) for i in data.initialisers]
    by_name = {v.name: v for v in variables}
    if not by_name:
        return issues
    names = symbols_pattern(by_name)
    code_ins = data.instructions
    findings = _Findings()

    def out_of_bytes(var: ModuleVariable, ins: Instruction, operand: str, at: int) -> None:
        width = _width(ins.opcode, ins.operands)
        if width is None:
            findings.add(var.name, "size", ins.line, f"`{ins.opcode}` copies a run-time number of bytes at module "
                         f"variable {var.name}: only a copy whose size the instruction states can be kept within its "
                         f"bytes")
        elif var.size is None:
            findings.add(var.name, "bounds", ins.line, f"`{ins.opcode}` writes module variable {var.name}, whose size "
                         f"its declaration does not state: declare it with its type and length (`.b8 {var.name}[N]`)")
        elif at < 0 or at + width > var.size:
            findings.add(var.name, "bounds", ins.line, f"`[{operand}]` reaches bytes {at}..{at + width - 1} of module "
                         f"variable {var.name}, which has {var.size}: outside it lies the driver's pool of module data, "
                         f"which no reset reaches")

    from .ptx_flow import tainted_before  # it reads this module's instructions
    from .address_use import USES, only_as_address

    holders = _address_holders(code_ins, by_name)
    before = tainted_before(code_ins, names, by_name)

    def involved(text: str, held: dict) -> ModuleVariable | None:
        """The module variable `text` names, or whose address a register in it holds here."""
        var = next((by_name[n] for n in names.findall(text)), None)
        return var or next((held[r] for r in _REGISTER.findall(text) if r in held), None)

    for ins, held_here in zip(code_ins, before):
        if ins.opcode.startswith("cvta.const"):
            var = involved(ins.operands, held_here)
            findings.add(var.name if var else "", "cvta", ins.line, f"`{ins.opcode}` makes a generic address of a "
                         f"constant, and a store through it writes the driver's pool of module data: read constants "
                         f"with `ld.const`")
            continue
        family, dest = ins.family, ins.dest
        for index, b in enumerate(_BRACKET.finditer(ins.operands)):
            var = involved(b.group(1), held_here)
            if var is None or family in _READS or (family == "cp" and index > 0):
                continue  # a read: nothing is kept by reading
            m = _MEM.fullmatch(b.group(0))
            at = (_int(m.group(3)) * (-1 if m.group(2) == "-" else 1) if m.group(3) else 0) if m else 0
            if m and m.group(1) in by_name:
                out_of_bytes(by_name[m.group(1)], ins, b.group(1).strip(), at)
            elif m and (held := holders.get((ins.function, m.group(1)))) is not None:
                out_of_bytes(held[0], ins, b.group(1).strip(), held[1] + at)
            else:
                findings.add(var.name, "write", ins.line, f"`{ins.opcode}` writes through `[{b.group(1).strip()}]`, an "
                             f"address computed from module variable {var.name}: module data is written only as "
                             f"`[{var.name}]` or `[{var.name}+offset]` within its {var.size or '?'} bytes (or a "
                             f"register a `mov` of it defines and only constant steps carry), since an address plus a "
                             f"computed offset reaches the driver's pool of module data beside it, where nothing is "
                             f"reset between calls; {FIX}")
        outside = _BRACKET.sub(" ", ins.operands)
        if dest is not None and family not in _STORES_VALUES:
            outside = outside[outside.index(dest) + len(dest):]  # the register it defines is not a use
        var = involved(outside, held_here)
        if var is None:
            continue
        if dest is None or family in _STORES_VALUES or family in _READS:
            findings.add(var.name, "value", ins.line, f"`{ins.opcode}` stores or passes on an address computed from "
                         f"module variable {var.name}: an address kept or handed on can be offset anywhere in the "
                         f"driver's pool of module data beside it, where nothing is reset between calls; {FIX}")
        elif not only_as_address(ins, lambda text: involved(text, held_here)):
            findings.add(var.name, "bits", ins.line, f"`{ins.opcode}` computes on the bits of an address of module "
                         f"variable {var.name}: tested, taken apart or looked up, they come back as a number the check "
                         f"no longer follows, and a write through it could reach the driver's pool of module data, "
                         f"where nothing is reset between calls; an address is only {USES}")
    return issues + findings.issues(language, to_source)


_FUNCTION_SCOPE = re.compile(r"^\$__(.+)__\d+$")  # ptxas's name for a `.global` declared inside a function


def unread_variables(code: str, symbols: list[str]) -> list[CompileIssue]:
    """ModuleData(code).unread(symbols): see _unread."""
    return ModuleData(code).unread(symbols)


def _unread(data: ModuleData, symbols: list[str]) -> list[CompileIssue]:
    """The module variables the cubin holds (`symbols`: module_state.module_globals' names) whose declaration the
    check did not read: a spelling ptxas takes and the parser does not would otherwise leave a variable unchecked."""
    declared = {v.name for v in data.variables}
    missing = [n for n in symbols if n not in declared
               and not ((m := _FUNCTION_SCOPE.match(n)) and m.group(1) in declared)]
    return [CompileIssue(message=f"module variable {name}: the check of module data could not read its declaration, so "
                                 f"the writes its address reaches cannot be bounded; declare it on a line of its own as "
                                 f"`.global .align A .TYPE {name}[N];` (or `.const`), or keep the data in a scratch "
                                 f"buffer of the launch plan") for name in missing]
