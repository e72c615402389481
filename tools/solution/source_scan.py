"""Cheap, line-preserving scans of PTX and CUDA source: blank out comments and strings, find kernel
entry points and their parameter lists. Used to check a solution's plan against its code before
anything is compiled; not a parser, just enough to name the right line in an error.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Literal

ParamKind = Literal["pointer", "tmap", "int", "float", "unknown"]


# Not after a literal's closing quote either: there `R` (`u8R`, ...) is the literal's ud-suffix and the `"` opens a plain
# string (`"x"R"/* "` holds no comment and no raw string for the compiler).
_RAW_PREFIX = re.compile(r'(?<![\w$"\'])(?:u8|u|U|L)?R"')  # nor after any identifier character (gcc: `$`, `é`)
# A number with C++14 digit separators (1'000): its `'` opens no character literal. Read as one, `1'2'/*` would
# hide the lines after it in a comment the compiler never sees.
# `e+` is tried before `e` alone: `0x1e+R` is one pp-number, so the `"` after it opens a plain string, not a raw one;
# but not after a separator (`1'e+` is `1'e` and `+` for gcc, whose sign rule looks two characters back).
# A separator `'` goes on only before an ASCII digit, letter or _ (`1'é` is 1 and a char literal for gcc), and so does a
# run of them, which gcc takes in whole (then refuses: adjacent digit separators), so `0'''0` is one number, not `0`, an
# empty char literal and `'0'` (possessive: a run not followed so is left whole, as gcc leaves it).
_PP_NUMBER = re.compile(r"\.?\d(?:(?<!')[eEpP][+-]|[\w.$]|'++(?=[0-9A-Za-z_]))*")


# The characters of a raw string's delimiter (C++'s basic character set but space, `(`, `)` and a backslash; gcc 12 refuses `$`,
# `@`, a backquote and any non-ASCII character there too), at most 16 of them.
_DELIMITER = re.compile(r"""[\w{}\[\]#<>%:;.?*+\-/^&|~!=,"']{0,16}""", re.ASCII)


def _raw_prefix(text: str, i: int) -> bool:
    """Whether the `"` at `i` ends a raw string's prefix (`R"`, `u8R"`, ...) for the compiler."""
    return any(m.end() == i + 1 for m in _RAW_PREFIX.finditer(text, max(0, i - 3), i + 1))


_DIRECTIVE_START = ("#", "%:", "??=")


def _raw_string(text: str, i: int, directive: bool, line_end: int) -> tuple[int, int, bool]:
    """(where its content starts, where it ends: its closing `"` or where gcc stops reading it, whether gcc refuses it)
    for the raw string whose prefix's `"` is at `i`.

    R"delim( ... )delim" has no escapes, may span lines, may hold `"` and `/*` (`R"x(" /* )x"` is no string followed by
    a comment). gcc refuses a delimiter of a character outside its set, of more than 16 of them, or cut by a line
    break, and reads on to the next `"` after it: after `LR""\\"` the next `"` opens a plain string, where a scan that
    took `""` for a whole string saw a `/*` after it open a comment. In a directive a raw string ends with its line (an
    "unterminated raw string") and the next line is code, where a scan that went on to `)delim"` skipped the lines
    between. check_cuda_source refuses each such file."""
    n = len(text)
    delim_end = _DELIMITER.match(text, i + 1).end()
    if text.startswith("(", delim_end):
        closer = ")" + text[i + 1:delim_end] + '"'
        close = text.find(closer, delim_end + 1, line_end if directive else n)
        if close >= 0:
            return delim_end + 1, close + len(closer) - 1, False
        if not directive:
            return delim_end + 1, n, False  # never closed: the rest of the file
        return delim_end + 1, line_end, True
    return i + 1, line_end if directive else text.find('"', delim_end) % (n + 1), True


def blank_comments(text: str, strings: bool = False, malformed: list[int] | None = None) -> str:
    """Replace // and /* */ comments (and, with strings=True, string and char literal contents) by
    spaces, keeping every newline so positions and line numbers stay the same. `malformed` collects where each raw
    string the compiler refuses opens."""
    out = list(text)
    i, n = 0, len(text)
    number_end = -1  # where the last pp-number ended: an `R` it took in (`0x1e+R`) starts no raw string
    # where the current line's first token starts (-1: none yet). A line, as gcc reads directives, starts after a
    # newline outside comments and literals: `/*` + newline + `*/ #include` is a directive, `#define X /*` + newline +
    # `*/ R"x(` a raw string in one.
    first = -1
    line_end = -1  # where the line of the last raw string ends
    while i < n:
        c = text[i]
        if c == "\n":
            first = -1
        elif first < 0 and not c.isspace() and not text.startswith(("//", "/*"), i):
            first = i
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out[i:j] = [ch if ch == "\n" else " " for ch in text[i:j]]
            i = j
        elif c == '"' and i > number_end and _raw_prefix(text, i):
            if line_end < i:
                line_end = text.find("\n", i) % (n + 1)  # n when no newline is left
            start, j, bad = _raw_string(text, i, first >= 0 and text.startswith(_DIRECTIVE_START, first), line_end)
            if bad and malformed is not None:
                malformed.append(i)
            if strings:
                out[start:j] = [ch if ch == "\n" else " " for ch in text[start:j]]
            i = j if j == line_end else j + 1  # a newline ending it is read as one
        # a number starts at a digit no identifier character precedes, or at a `.` before a digit whatever precedes
        # it (`a.5'L'` is a, .5'L and a char literal for gcc)
        elif ((c.isdigit() and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_.$")))
              or (c == "." and text[i + 1:i + 2].isdigit())) and (number := _PP_NUMBER.match(text, i)):
            i = number_end = number.end()
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if strings:  # a backslash-newline continues the literal on the next line: keep that newline
                out[i + 1:min(j, n)] = [ch if ch == "\n" else " " for ch in text[i + 1:min(j, n)]]
            if j < n and text[j] == "\n":  # unterminated: it ends with its line, whose newline is passed over here
                first = -1
            i = j + 1
        else:
            i += 1
    return "".join(out)


def spliced(text: str) -> str:
    """`text` with every backslash-newline joined, as the compiler joins them before it reads a comment or a directive
    (`// x \\` continues the comment onto the next line, `*\\` + newline + `/` ends a block comment), each joined
    newline moved to the end of its logical line, so every line after it keeps its number."""
    if "\\" not in text:
        return text
    out: list[str] = []
    logical: list[str] = []
    for line in text.split("\n"):
        body = line.rstrip(" \t\f\v\r")  # gcc splices across white space after the backslash too
        if body.endswith("\\"):
            logical.append(body[:-1])
            continue
        out.append("".join(logical) + line + "\n" * len(logical))
        logical = []
    if logical:  # the file ends in a backslash
        out.append("".join(logical) + "\n" * (len(logical) - 1))
    return "\n".join(out)


def line_of(text: str, pos: int) -> int:
    """1-based line number of a character position."""
    return text.count("\n", 0, pos) + 1


def unencodable(text: str) -> tuple[int, str] | None:
    """(line, the character escaped) of the first character UTF-8 cannot encode, or None. A lone surrogate (what a
    JSON "\\ud800" decodes to) is a Python string but no file, compiler or log can hold it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return line_of(text, e.start), ascii(text[e.start])[1:-1]
    return None


class LineIndex:
    """line_of for many positions in one text (bisect over newline offsets)."""

    def __init__(self, text: str):
        self.newlines = [m.start() for m in re.finditer("\n", text)]

    def __call__(self, pos: int) -> int:
        return bisect.bisect_left(self.newlines, pos) + 1


def matching_closes(text: str, opening: str = "(", closing: str = ")") -> dict[int, int]:
    """The position of the bracket closing each opening one, found in one pass with a stack (an opening bracket
    never closed has no entry): a scan from each bracket to its close is quadratic over many unclosed ones."""
    closes: dict[int, int] = {}
    stack: list[int] = []
    for m in re.finditer(re.escape(opening) + "|" + re.escape(closing), text):
        if m.group() == opening:
            stack.append(m.start())
        elif stack:
            closes[stack.pop()] = m.start()
    return closes


class Ranges:
    """Whether a position lies in any of many [start, end) ranges: merged once, then a bisect per question."""

    def __init__(self, ranges):
        merged: list[list[int]] = []
        for a, b in sorted(ranges):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.starts = [a for a, _ in merged]
        self.ends = [b for _, b in merged]

    def __contains__(self, pos: int) -> bool:
        k = bisect.bisect_right(self.starts, pos) - 1
        return k >= 0 and pos < self.ends[k]


def _list_ends(found: list[re.Match], closes: dict[int, int], text_end: int) -> list[int]:
    """Where each declaration's parameter list (its match ends at the '(') ends: at its ')', but never past the next
    declaration, so each character is read once however many lists are left open."""
    ends = []
    for k, m in enumerate(found):
        limit = found[k + 1].start() if k + 1 < len(found) else text_end
        ends.append(min(closes.get(m.end() - 1, limit), limit))
    return ends


def split_top_level(text: str) -> list[tuple[int, str]]:
    """Split at commas outside (), [], {} and <>; return (offset, piece) pairs, empty pieces dropped."""
    pieces, depth, start = [], 0, 0
    for k, ch in enumerate(text + ","):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth <= 0:
            if text[start:k].strip():
                pieces.append((start + len(text[start:k]) - len(text[start:k].lstrip()), text[start:k].strip()))
            start = k + 1
    return pieces


@dataclass
class Param:
    text: str
    line: int
    kind: ParamKind
    size: int | None  # bytes, when known
    align: int | None = None


@dataclass
class Entry:
    name: str
    line: int
    params: list[Param] = field(default_factory=list)
    extern_c: bool = True  # CUDA only: declared extern "C" (name not mangled)
    span: tuple[int, int] = (0, 0)  # character range of the declaration up to its parameter list's end
    defined: bool = True  # False for a prototype alone (`.extern .entry k(...);`): the compiled module has no k


# A parameter list closed by `;`: a prototype, no definition. (Anything else after it, a body or a PTX performance
# directive or `.pragma "...";` before the body, counts as a definition.)
_PROTOTYPE_END = re.compile(r"\)\s*;")


def _add_entry(entries: dict[str, Entry], entry: Entry, text: str, list_end: int) -> None:
    """Keep `entry` under its name; a prototype does not replace a definition, and the name counts as defined when any
    of its declarations is one."""
    entry.defined = _PROTOTYPE_END.match(text, list_end) is None
    if (known := entries.get(entry.name)) is None or entry.defined or not known.defined:
        entries[entry.name] = entry


_PTX_TYPE = re.compile(r"\.(u|s|b|f)(8|16|32|64)\b")
_PTX_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)\s*(\()?")


def _ptx_param(piece: str, line: int) -> Param:
    m = _PTX_TYPE.search(piece)
    if not m:
        return Param(piece, line, "unknown", None)
    bits, letter = int(m.group(2)), m.group(1)
    count = re.search(r"\[\s*(\d{1,9})\s*\]", piece)  # bounded: int() refuses past 4,300 digits
    size = bits // 8 * (int(count.group(1)) if count else 1)
    align = re.search(r"\.align\s+(\d{1,9})\b", piece)
    kind: ParamKind = "tmap" if size == 128 and count else "float" if letter == "f" else "int"
    if size == 8 and letter in "ub" and not count:
        kind = "int"  # a .u64 may be a pointer or a 64-bit integer: checked by size only
    return Param(piece, line, kind, size, int(align.group(1)) if align else None)


def ptx_entries(source: str) -> dict[str, Entry]:
    """The .entry kernels of a PTX module with their parameters."""
    text = blank_comments(source)
    line_of = LineIndex(text)
    found = list(_PTX_ENTRY.finditer(text))
    ends = _list_ends(found, matching_closes(text), len(text))
    entries: dict[str, Entry] = {}
    for m, end in zip(found, ends):
        entry = Entry(m.group(1), line_of(m.start()))
        if m.group(2):
            for off, piece in split_top_level(text[m.end():end]):
                entry.params.append(_ptx_param(piece, line_of(m.end() + off)))
            _add_entry(entries, entry, text, end)
        else:
            entries[entry.name] = entry
    return entries


# The declaration between __global__ and the name is bounded: an unbounded lazy scan is quadratic
# over a file of repeated `__global__`.
_CUDA_KERNEL = re.compile(r"__global__\b([^;{}()]{0,400}?)\b([A-Za-z_]\w*)\s*\(")
_ATTRS = re.compile(r"__(launch_bounds|cluster_dims|maxnreg)__\s*\(")
_FLOAT_TYPES = {"float": 4, "double": 8}
_INT_TYPES = {"int": 4, "unsigned": 4, "int32_t": 4, "uint32_t": 4, "long long": 8, "int64_t": 8,
              "uint64_t": 8, "size_t": 8, "unsigned int": 4, "unsigned long long": 8}


def _strip_attributes(text: str) -> str:
    """Blank __launch_bounds__(...) and friends (their parentheses would look like a parameter list), left to
    right in one pass."""
    closes = matching_closes(text)
    out, pos = [], 0
    for m in _ATTRS.finditer(text):
        if m.start() < pos:
            continue  # inside an attribute blanked already
        end = closes[m.end() - 1] + 1 if m.end() - 1 in closes else m.end()
        out += [text[pos:m.start()], re.sub(r"[^\n]", " ", text[m.start():end])]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _cuda_param(piece: str, line: int) -> Param:
    if "*" in piece or "&" in piece:  # a pointer to a CUtensorMap too: 8 bytes, not the map by value
        return Param(piece, line, "pointer", 8)
    if "CUtensorMap" in piece:
        return Param(piece, line, "tmap", 128)
    words = re.sub(r"\b(const|volatile|__restrict__|__grid_constant__)\b", " ", piece).split()
    type_text = " ".join(words[:-1]) if len(words) > 1 else ""
    if type_text in _FLOAT_TYPES:
        return Param(piece, line, "float", _FLOAT_TYPES[type_text])
    if type_text in _INT_TYPES:
        return Param(piece, line, "int", _INT_TYPES[type_text])
    return Param(piece, line, "unknown", None)


def _extern_c_ranges(text: str) -> Ranges:
    closes = matching_closes(text, "{", "}")
    return Ranges((m.end(), closes[m.end() - 1]) for m in re.finditer(r'extern\s*"C"\s*\{', text) if m.end() - 1 in closes)


def cuda_kernels(source: str) -> dict[str, Entry]:
    """The __global__ functions of a CUDA file with their parameters (comments ignored)."""
    text = _strip_attributes(blank_comments(source))
    blocks = _extern_c_ranges(text)
    line_of = LineIndex(text)
    found = list(_CUDA_KERNEL.finditer(text))
    ends = _list_ends(found, matching_closes(text), len(text))
    kernels: dict[str, Entry] = {}
    for m, end in zip(found, ends):
        name, open_pos = m.group(2), m.end() - 1
        window = max(0, m.start() - 2000)  # a bounded look back keeps many kernels linear
        before = text[max(window, text.rfind(";", window, m.start()), text.rfind("}", window, m.start()),
                          text.rfind("{", window, m.start())):m.start()]
        extern_c = bool(re.search(r'extern\s*"C"', before)) or m.start() in blocks
        entry = Entry(name, line_of(m.start()), extern_c=extern_c)
        body = text[open_pos + 1:end]
        entry.span = (m.start(), end)
        if body.strip() not in ("", "void"):
            for off, piece in split_top_level(body):
                entry.params.append(_cuda_param(piece, line_of(open_pos + 1 + off)))
        _add_entry(kernels, entry, text, end)
    return kernels
