"""Every module of a code folder is named in that folder's README.md, and every test file and helper in tests/README.md
(STYLE.md: a short README in each folder saying what lives there). A module added without a word about it fails here,
not in a newcomer's search."""
from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = ("agent", "tools", "workloads", "prompts", "bench")
NOT_MODULES = {"__init__.py", "__main__.py", "conftest.py"}


def _modules(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix in (".py", ".sh") and p.name not in NOT_MODULES)


def names(readme: str, module: str) -> bool:
    """The file name, its stem as a word, or a glob the README gives for a family (`cmd_*.py`): one with a name part,
    not a bare * (a footnote mark), which every file matches."""
    stem = re.escape(Path(module).stem)
    if re.search(rf"(?<![\w.]){stem}(?!\w)", readme):
        return True
    return any(fnmatch.fnmatch(module, g) for g in re.findall(r"[\w.]*\*[\w.*]*", readme) if re.search(r"\w", g))


def _code_folders() -> list[Path]:
    out = []
    for top in CODE:
        for d in [ROOT / top, *sorted((ROOT / top).rglob("*"))]:
            if d.is_dir() and "__pycache__" not in d.parts and _modules(d):
                out.append(d)
    return out


@pytest.mark.parametrize("folder", _code_folders(), ids=lambda d: str(d.relative_to(ROOT)))
def test_each_code_folder_readme_names_its_modules(folder):
    readme = folder / "README.md"
    assert readme.exists(), f"{folder.relative_to(ROOT)} has modules and no README.md"
    text = readme.read_text(encoding="utf-8")
    assert [m for m in _modules(folder) if not names(text, m)] == []


def test_tests_readme_names_every_test_file_and_helper():
    text = (ROOT / "tests" / "README.md").read_text(encoding="utf-8")
    files = sorted(p for p in (ROOT / "tests").rglob("*.py")
                   if "data" not in p.relative_to(ROOT / "tests").parts and p.name not in NOT_MODULES)
    assert [str(p.relative_to(ROOT)) for p in files if not names(text, p.name)] == []


def test_a_missing_name_is_caught():
    """The check can fail: a stem that only appears inside a longer word or path does not count."""
    assert not names("see test_scoring_more.py and my_test_scoring.py", "test_scoring.py")
    assert not names("the pool_x module", "pool.py")
    assert names("one module per command (`cmd_*.py`)", "cmd_eval.py")
    assert names("| `pool.py` | the pool |", "pool.py") and names("tools/gpu/pool.py", "pool.py")
    # a bare * (tests/README.md's "Files marked * hold gpu tests") is no glob of file names: it named every file
    assert not names("Files marked * hold `gpu` tests; see test_scoring.py*", "test_new.py")
    assert names("Files marked * hold `gpu` tests; see test_scoring.py*", "test_scoring.py")
