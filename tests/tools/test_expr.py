"""The plan-expression evaluator: what it computes, and everything it must refuse."""
from __future__ import annotations

import math

import pytest

from ptxbench.tools.solution.expr import MAX_LENGTH, ExprError, evaluate, evaluate_int, names

SYMBOLS = {"M": 8192, "N": 7168, "K": 5120, "num_sms": 132, "scale": 0.125}


@pytest.mark.parametrize("expr, value", [
    ("cdiv(N, 128) * cdiv(M, 128)", 56 * 64),
    ("min(num_sms, cdiv(M, 128) * cdiv(N, 256))", 132),
    ("max(1, 2, 3)", 3),
    ("4 * 2 * 128 * 64 * 2 + 1024", 132096),
    ("(M + 127) // 128", 64),
    ("M % 100", 92),
    ("2 ** 10", 1024),
    ("-M + 1", -8191),
    ("+K", 5120),
    ("log2(1024)", 10.0),
    ("sqrt(16)", 4.0),
    ("ceil(1.5) + floor(2.5)", 4),
    ("scale * 8", 1.0),
    ("M / 2", 4096.0),
    ("cdiv(7, 2.0)", 4),
    (128, 128),
    (0.5, 0.5),
])
def test_values(expr, value):
    assert evaluate(expr, SYMBOLS) == value


def test_cdiv_is_exact_for_large_ints():
    assert evaluate("cdiv(2**62 + 1, 2)", {}) == 2**61 + 1


def test_evaluate_int_accepts_integral_floats_and_refuses_fractions():
    assert evaluate_int("M / 2", SYMBOLS) == 4096
    assert isinstance(evaluate_int("M / 2", SYMBOLS), int)
    with pytest.raises(ExprError, match="expected a whole number"):
        evaluate_int("3 / 2", SYMBOLS)


@pytest.mark.parametrize("expr, message", [
    ("().__class__", "attribute access"),
    ("M.__class__.__bases__", "attribute access"),
    ("eval('1')", "unknown function 'eval'"),
    ("__import__('os').system('ls')", "by bare name"),
    ("exec('x')", "unknown function 'exec'"),
    ("M[0]", "subscripts"),
    ("lambda: 1", "lambdas"),
    ("[x for x in (1, 2)]", "comprehensions"),
    ("'abc'", "strings"),
    ("M if N else K", "conditional"),
    ("M < N", "comparisons"),
    ("M and N", "and/or"),
    ("min(M, key=N)", "keyword arguments"),
    ("(M := 3)", "assignments"),
    ("True + 1", "True"),
    ("cdiv + 1", "must be called"),
    ("cdiv(M)", "cdiv takes 2 arguments, got 1"),
    ("min()", "at least one argument"),
    ("Q * 2", "unknown name 'Q'"),
    ("2 ** 65", "exponent 65 is too large"),
    ("2 ** 64", "too large"),
    ("9 ** 9 ** 9", "too large"),
    ("M ** 20", "too large"),
    ("M / 0", "division by zero"),
    ("M // (N - N)", "division by zero"),
    ("M % 0", "division by zero"),
    ("cdiv(M, 0)", "division by zero"),
    ("0 ** -1", "division by zero"),
    ("log2(0)", "positive"),
    ("sqrt(-1)", ">= 0"),
    ("(-8) ** 0.5", "not a real number"),
    ("1e400", "not finite"),
    ("1e300 * 1e300", "not finite|too large"),
    ("M +", "syntax error"),
    ("", "empty"),
    ("1; 2", "syntax error"),
])
def test_refusals(expr, message):
    with pytest.raises(ExprError, match=message):
        evaluate(expr, SYMBOLS)


def test_unknown_name_lists_known_symbols_and_functions():
    with pytest.raises(ExprError) as err:
        evaluate("cdiv(Q, 128)", SYMBOLS)
    text = str(err.value)
    assert "'Q'" in text and "K, M, N, num_sms, scale" in text and "cdiv" in text
    assert err.value.token == "Q"


def test_error_names_the_offending_token():
    with pytest.raises(ExprError) as err:
        evaluate("cdiv(N, 128) + M.real", SYMBOLS)
    assert err.value.token == "M.real"
    assert "'cdiv(N, 128) + M.real'" in str(err.value)


def test_length_and_node_bounds():
    with pytest.raises(ExprError, match=f"at most {MAX_LENGTH}"):
        evaluate("1+" * 300 + "1", SYMBOLS)
    with pytest.raises(ExprError, match="syntax nodes"):
        evaluate("+".join(["M"] * 150), SYMBOLS)
    with pytest.raises(ExprError):
        evaluate("(" * 240 + "1" + ")" * 240, SYMBOLS)  # deeper than Python's parser allows


def test_non_string_inputs():
    with pytest.raises(ExprError):
        evaluate(True, SYMBOLS)
    with pytest.raises(ExprError):
        evaluate([1], SYMBOLS)  # type: ignore[arg-type]
    with pytest.raises(ExprError, match="not finite"):
        evaluate(math.inf, SYMBOLS)


def test_names_checks_form_without_values():
    assert names("cdiv(M, 128) * num_sms") == {"M", "num_sms"}
    assert names(64) == set()
    assert names("M / 0") == {"M"}  # values are only known once a workload is given
    with pytest.raises(ExprError, match="attribute access"):
        names("M.__class__")
    with pytest.raises(ExprError, match="unknown function 'open'"):
        names("open('f')")
    with pytest.raises(ExprError, match="exponent"):
        names("2 ** 100")  # a constant expression is checked fully


def test_module_never_calls_eval_exec_or_compile():
    import ast
    from pathlib import Path

    import ptxbench.tools.solution.expr as mod
    tree = ast.parse(Path(mod.__file__).read_text())
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not called & {"eval", "exec", "compile", "__import__"}


@pytest.mark.parametrize("expr, shown", [
    ("\uff2d * 2", "'\uff2d' (U+FF2D) at column 1"),  # full-width M: Python reads it as M
    ("\uff43\uff44\uff49\uff56(M, 128)", "(U+FF43) at column 1"),  # full-width cdiv
    ("cdiv(\U0001d441, 128)", "(U+1D441) at column 6"),  # mathematical italic N
    ("M\u00a0+ 1", "U+00A0"),  # a no-break space
])
def test_a_non_ascii_character_is_refused_not_read_as_its_ascii_lookalike(expr, shown):
    """Python folds identifiers to NFKC, so a full-width or mathematical letter read as its ASCII letter: a plan that
    looked like it named no known symbol ran as if it did."""
    for check in (lambda: evaluate(expr, SYMBOLS), lambda: names(expr)):
        with pytest.raises(ExprError, match="non-ASCII character") as err:
            check()
        assert shown in str(err.value), str(err.value)
