"""A small, safe evaluator for launch-plan expressions such as "cdiv(M, 128) * cdiv(N, 256)".

Model text never reaches eval(): the expression is parsed with ast.parse(mode="eval") and walked
against a whitelist (numbers, known symbols, + - * / // % **, unary minus and a few functions
called by bare name), in ASCII only (Python would read a full-width letter as its ASCII one).
Every intermediate value is bounded, so no expression can allocate a huge integer or run for long.
"""
from __future__ import annotations

import ast
import math
import operator
import unicodedata
from collections.abc import Callable, Mapping

MAX_LENGTH = 500
MAX_NODES = 200
MAX_EXPONENT = 64
LIMIT = 2**63

Number = int | float


class ExprError(ValueError):
    """An expression that is malformed, uses something outside the whitelist, or has an unsafe value."""

    def __init__(self, message: str, expr: str = "", token: str = ""):
        super().__init__(message)
        self.expr = expr
        self.token = token


def _cdiv(a: Number, b: Number) -> Number:
    if b == 0:
        raise ZeroDivisionError("cdiv by zero")
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return math.ceil(a / b)


def _log2(x: Number) -> Number:
    if x <= 0:
        raise ValueError(f"log2 of {x} (needs a positive number)")
    return math.log2(x)


def _sqrt(x: Number) -> Number:
    if x < 0:
        raise ValueError(f"sqrt of {x} (needs a number >= 0)")
    return math.sqrt(x)


FUNCTIONS: dict[str, tuple[Callable[..., Number], int | None]] = {
    # name -> (function, exact argument count or None for "one or more")
    "cdiv": (_cdiv, 2),
    "min": (lambda *a: min(a), None),  # min(a) of a tuple: min(5) alone would iterate over 5 (TypeError)
    "max": (lambda *a: max(a), None),
    "log2": (_log2, 1),
    "sqrt": (_sqrt, 1),
    "ceil": (math.ceil, 1),
    "floor": (math.floor, 1),
}

_BINARY: dict[type, Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Number], Number]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}

_WHAT = {
    ast.Attribute: "attribute access", ast.Subscript: "subscripts", ast.Lambda: "lambdas",
    ast.ListComp: "comprehensions", ast.SetComp: "comprehensions", ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions", ast.Compare: "comparisons", ast.BoolOp: "and/or",
    ast.IfExp: "conditional expressions", ast.List: "lists", ast.Tuple: "tuples", ast.Dict: "dicts",
    ast.Set: "sets", ast.JoinedStr: "strings", ast.NamedExpr: "assignments", ast.Starred: "unpacking",
}


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Constant):
        return "strings" if isinstance(node.value, (str, bytes)) else f"the constant {node.value!r}"
    if isinstance(node, ast.BinOp):
        return f"the operator {type(node.op).__name__}"
    return _WHAT.get(type(node), type(node).__name__)


class _Walker:
    def __init__(self, expr: str, symbols: Mapping[str, Number] | None):
        self.expr = expr
        self.symbols = symbols

    def fail(self, node: ast.AST | None, message: str) -> ExprError:
        token = (ast.get_source_segment(self.expr, node) or "") if node is not None else ""
        where = f" at '{token}' in '{self.expr}'" if token and token != self.expr else f" in '{self.expr}'"
        return ExprError(f"{message}{where}", self.expr, token)

    def known(self) -> str:
        names = sorted(self.symbols or {})
        return f"known symbols: {', '.join(names) or '(none)'}; functions: {', '.join(FUNCTIONS)}"

    def bounded(self, node: ast.AST, value: object) -> Number:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(node, f"value {value!r} is not a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(node, "result is not finite")
        if abs(value) >= LIMIT:
            raise self.fail(node, "result is too large (|x| must be below 2**63)")
        return value

    def visit(self, node: ast.AST) -> Number:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise self.fail(node, f"{_describe(node)} are not allowed" if isinstance(node.value, (str, bytes))
                                else f"{_describe(node)} is not allowed")
            return self.bounded(node, node.value)
        if isinstance(node, ast.Name):
            if node.id in FUNCTIONS:
                raise self.fail(node, f"function '{node.id}' must be called, e.g. {node.id}(...)")
            if self.symbols is None:
                return 1  # structure-only check: names are resolved later
            if node.id not in self.symbols:
                raise self.fail(node, f"unknown name '{node.id}' ({self.known()})")
            return self.bounded(node, self.symbols[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self.visit(node.left), self.visit(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
                raise self.fail(node, f"exponent {right} is too large (at most {MAX_EXPONENT})")
            try:
                value = _BINARY[type(node.op)](left, right)
            except ZeroDivisionError:
                raise self.fail(node, "division by zero") from None
            except (OverflowError, ValueError, TypeError) as e:
                raise self.fail(node, f"cannot compute: {e}") from None
            if isinstance(value, complex):
                raise self.fail(node, "result is not a real number")
            return self.bounded(node, value)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return self.bounded(node, _UNARY[type(node.op)](self.visit(node.operand)))
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.fail(node, f"{_describe(node)} not allowed (only numbers, symbols, + - * / // % **, "
                              f"parentheses and {', '.join(FUNCTIONS)})")

    def call(self, node: ast.Call) -> Number:
        if not isinstance(node.func, ast.Name):
            raise self.fail(node.func, "only the functions " + ", ".join(FUNCTIONS) + " may be called, by bare name")
        name = node.func.id
        if name not in FUNCTIONS:
            raise self.fail(node.func, f"unknown function '{name}' (allowed: {', '.join(FUNCTIONS)})")
        if node.keywords:
            raise self.fail(node.keywords[0], "keyword arguments are not allowed")
        fn, arity = FUNCTIONS[name]
        if (arity is not None and len(node.args) != arity) or (arity is None and not node.args):
            want = f"{arity} argument{'s' * (arity != 1)}" if arity else "at least one argument"
            raise self.fail(node, f"{name} takes {want}, got {len(node.args)}")
        args = [self.visit(a) for a in node.args]
        try:
            return self.bounded(node, fn(*args))
        except ZeroDivisionError:
            raise self.fail(node, "division by zero") from None
        except (OverflowError, ValueError, TypeError) as e:
            raise self.fail(node, f"cannot compute: {e}") from None


def _ascii_only(expr: str) -> None:
    """Refuse any character outside ASCII: Python folds identifiers to NFKC, so a full-width `Ｍ` (or a mathematical
    `𝑀`) would be read as `M`, a name the plan's text does not show."""
    for column, char in enumerate(expr, 1):
        if not char.isascii():
            shown = f"'{char}' " if char.isprintable() and not char.isspace() else ""
            folded = unicodedata.normalize("NFKC", char)
            hint = f" (Python would read it as '{folded}': write that)" if folded.isascii() and folded.strip() else ""
            raise ExprError(f"non-ASCII character {shown}(U+{ord(char):04X}) at column {column} in '{expr}': plan "
                            f"expressions are ASCII only{hint}", expr, char)


def _parse(expr: str) -> ast.Expression:
    if len(expr) > MAX_LENGTH:
        raise ExprError(f"expression is {len(expr)} characters long (at most {MAX_LENGTH})", expr[:40] + "...")
    _ascii_only(expr)
    if not expr.strip():
        raise ExprError("empty expression", expr)
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"syntax error in '{expr}': {e.msg} (column {e.offset})", expr) from None
    except (RecursionError, MemoryError, ValueError):
        raise ExprError(f"expression '{expr[:60]}' is too deeply nested", expr) from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise ExprError(f"expression has {count} syntax nodes (at most {MAX_NODES})", expr)
    return tree


def _run(expr: Number | str, symbols: Mapping[str, Number] | None) -> Number:
    if isinstance(expr, bool):
        raise ExprError(f"expected a number or an expression string, got {expr!r}", str(expr))
    if isinstance(expr, (int, float)):
        text = repr(expr)
        return _Walker(text, symbols).bounded(ast.Constant(expr), expr)
    if not isinstance(expr, str):
        raise ExprError(f"expected a number or an expression string, got {type(expr).__name__} {expr!r}", str(expr))
    tree = _parse(expr)
    try:
        return _Walker(expr.strip(), symbols).visit(tree.body)
    except RecursionError:
        raise ExprError(f"expression '{expr[:60]}' is too deeply nested", expr) from None


def evaluate(expr: Number | str, symbols: Mapping[str, Number]) -> Number:
    """The value of a plan expression (a number, or a string over `symbols` and the whitelisted functions)."""
    return _run(expr, symbols)


def evaluate_int(expr: Number | str, symbols: Mapping[str, Number]) -> int:
    """Like evaluate, but the value must be integral (128.0 is fine, 1.5 is an ExprError)."""
    value = _run(expr, symbols)
    if isinstance(value, float):
        if not value.is_integer():
            raise ExprError(f"'{expr}' is {value}, expected a whole number", str(expr))
        return int(value)
    return value


def names(expr: Number | str) -> set[str]:
    """Validate an expression's form without any symbol values; return the symbol names it uses."""
    if not isinstance(expr, str):
        _run(expr, {})
        return set()
    tree = _parse(expr)
    walker = _Walker(expr.strip(), None)
    callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    found: set[str] = set()
    for node in ast.walk(tree.body):
        if isinstance(node, (ast.operator, ast.unaryop, ast.expr_context)) or id(node) in callees:
            continue
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
                walker.call(node)  # raises the precise error
            fn, arity = FUNCTIONS[node.func.id]
            if (arity is not None and len(node.args) != arity) or not node.args:
                walker.call(node)
        elif isinstance(node, ast.Name) and node.id not in FUNCTIONS:
            found.add(node.id)
        elif isinstance(node, ast.Constant) or (isinstance(node, (ast.BinOp, ast.UnaryOp))
                                                and type(node.op) in {**_BINARY, **_UNARY}):
            if isinstance(node, ast.Constant):
                walker.visit(node)  # rejects strings, booleans, huge literals
        else:
            walker.visit(node)  # rejects everything outside the whitelist
    if not found:
        _Walker(expr.strip(), {}).visit(tree.body)  # a constant expression can be checked fully now
    return found
