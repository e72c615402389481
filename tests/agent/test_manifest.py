"""agent/records/manifest.py: the git revision a run's manifest records."""
import shutil
import subprocess
from pathlib import Path

import pytest

from ptxbench.agent.records import manifest

CHECKOUT = Path(__file__).resolve().parents[2]


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(not shutil.which("git") or not (CHECKOUT / ".git").exists() or manifest.PACKAGE_ROOT != CHECKOUT,
                    reason="needs the tests run from a git checkout whose own package is the one imported")
def test_manifest_in_the_checkout_records_its_revision():
    built = manifest.build_manifest({}, "test", [])
    assert built["git"]["revision"] == _git("rev-parse", "HEAD", cwd=CHECKOUT)
    assert isinstance(built["git"]["dirty"], bool)


@pytest.mark.skipif(not shutil.which("git"), reason="no git")
def test_package_inside_another_repository_records_no_revision(tmp_path, monkeypatch):
    """A wheel installed in a virtual environment inside the user's own repository: that repository's revision says
    nothing of ptxbench's code, so none is recorded."""
    _git("init", "-q", cwd=tmp_path)
    installed = tmp_path / ".venv" / "lib" / "site-packages" / "ptxbench"
    installed.mkdir(parents=True)
    monkeypatch.setattr(manifest, "PACKAGE_ROOT", installed.resolve())
    assert manifest.checkout_root() is None and manifest.git_info() == {}


def test_package_outside_any_repository_records_no_revision(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "PACKAGE_ROOT", tmp_path.resolve())
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert manifest.git_info() == {}
