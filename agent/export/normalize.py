"""Normalised kernel hash for de-duplication: comments and white space between tokens do not count; the plan block
does."""
from __future__ import annotations

import hashlib
import re

_PLAN = re.compile(r"/\*\s*ptxbench.*?\*/", re.S)
# Strings, character literals and comments in one left-to-right scan: a "/*" inside a // comment opens nothing
# (stripping block comments first ate the code up to the next */), and a "//" inside a string (an inline-asm
# comment) is no comment. An unclosed "/*" runs to the end, as the compilers read it, and an unclosed quote to the end
# of its line (each searched again from every unclosed opener for its close, a kernel of them was quadratic). A number
# is read first, so that a C++14 digit separator (1'000) opens no character literal.
_TOKEN = re.compile(r'(?<![\w.])\.?\d(?:[\w.]|\'(?=\w)|[eEpP][+-])*'
                    r'|"(?:\\.|[^"\\\n])*"?|\'(?:\\.|[^\'\\\n])*\'?|//[^\n]*|/\*.*?(?:\*/|\Z)', re.S)
_SPACE = re.compile(r"\s+")
# The code's tokens, left to right, each punctuator the longest that C, C++ and PTX have (maximal munch, as the
# compilers read them): joined with one space, `x=a+b` and `x = a + b` are one kernel, while `--b` and `- -b`, or
# `&&` and `& &`, stay two. A string or character literal is one token (its white space collapsed, as before).
_LEX = re.compile(r'(?<![\w.])\.?\d(?:[\w.]|\'(?=\w)|[eEpP][+-])*|"(?:\\.|[^"\\\n])*"?|\'(?:\\.|[^\'\\\n])*\'?'
                  r'|\w+|>>=|<<=|->\*?|\.\.\.|\.\*|::|##|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|\S')


def normalized_kernel(source: str) -> str:
    plans: list[str] = []

    def drop(m: re.Match) -> str:
        text = m.group(0)
        if not text.startswith(("//", "/*")):
            return text
        if _PLAN.fullmatch(text):  # kept whole: `M // 128` inside it is an expression, not a comment
            plans.append(text)
        return " "

    code = _TOKEN.sub(drop, source)
    # only a plan or a string / character literal holds white space (the lexer's other tokens have none)
    return " ".join(_SPACE.sub(" ", t) if t[0] in "\"'/" else t for t in [*plans, *_LEX.findall(code)])


def kernel_hash(*sources: str) -> str:
    h = hashlib.sha256()
    for s in sources:
        h.update(normalized_kernel(s).encode())
        h.update(b"\0")
    return h.hexdigest()
