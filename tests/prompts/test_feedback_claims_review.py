"""prompts/feedback_profile.md against the code that fills it (tools/profile/feedback.py, tools/profile/brief.py).

A sentence whose `{placeholder}` no `.format` call supplies raises KeyError in the middle of a turn's feedback, and one
that is used without `.format` hands the model the braces: every placeholder of every key must be supplied by a call
on that key (or on a key of its section picked at run time), read from the code's syntax tree.
"""
from __future__ import annotations

import ast
import string
from pathlib import Path

from ptxbench.tools.profile.feedback import template

ROOT = Path(__file__).resolve().parents[2]
FILLERS = [ROOT / "tools" / "profile" / "feedback.py", ROOT / "tools" / "profile" / "brief.py"]


def _placeholders(text: str) -> set[str]:
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(text) if name}


def _chain(node: ast.AST, names: dict[str, tuple]) -> tuple | None:
    """The template path a receiver names: ("other", "hot_line"), ("other", None) for a key picked at run time,
    ("frame",); None when it is not the template."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "template":
        return ()
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Subscript):
        base = _chain(node.value, names)
        if base is None:
            return None
        key = node.slice.value if isinstance(node.slice, ast.Constant) else None
        return base + (key,)
    return None


def _calls() -> list[tuple[tuple, set[str] | None]]:
    """(template path, the keyword names passed; None when some cannot be read) of every `.format` call on the template."""
    found = []
    for path in FILLERS:
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef):
                continue
            names, dicts = {}, {}
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    target = node.targets[0].id
                    if (chain := _chain(node.value, names)) is not None:
                        names[target] = chain
                    elif isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "dict":
                        dicts[target] = {k.arg for k in node.value.keywords}
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"):
                    continue
                chain = _chain(node.func.value, names)
                if chain is None:
                    continue
                kwargs: set[str] | None = set()
                for k in node.keywords:
                    if k.arg is not None:
                        kwargs.add(k.arg)
                    elif isinstance(k.value, ast.Name) and k.value.id in dicts:
                        kwargs |= dicts[k.value.id]
                    else:
                        kwargs = None
                        break
                found.append((chain, kwargs))
    return found


def test_every_placeholder_of_the_profile_feedback_is_supplied_by_its_call():
    calls = _calls()
    assert len(calls) >= 15, calls  # the reader finds the fillers' calls
    t = template()
    keys = [(("frame",), t["frame"])] + [((section, key), text) for section, entries in t.items() if section != "frame"
                                         for key, text in entries.items()]
    for path, text in keys:
        wanted = _placeholders(text)
        if not wanted:
            continue
        section = path[:-1]
        covering = [kw for chain, kw in calls if chain == path or (len(path) > 1 and chain == section + (None,))]
        exact = [kw for chain, kw in calls if chain == path]
        assert covering, f"{'/'.join(path)} has {sorted(wanted)} but no .format call fills it: the braces reach the model"
        for kw in exact:  # a call on this very key must pass every placeholder
            assert kw is None or wanted <= kw, (path, sorted(wanted - kw))
        assert any(kw is None or wanted <= kw for kw in covering), (path, sorted(wanted), covering)
