"""Whether a run is resumed under other code than it began with (a git pull between its start and its --resume): the
resume goes on under the new code's defaults, which is legitimate (a fix pulled to finish a run) but must be known.

    note_resumed_revision(manifest, "bench --resume")   the warning line, or None when the code is the recorded one;
                                                         records the resume in manifest["resumed_under"] (the caller
                                                         writes the manifest back), so that score and report can tell
    note_code_change(run_dir, how)                      the same on the run folder's manifest, written back when noted
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from . import manifest as run_manifest

RESUMED_UNDER = "resumed_under"  # manifest key: one entry per resume under other code, oldest first


def _state(git: dict[str, Any]) -> str:
    revision = str(git.get("revision") or "")[:12] or "an unknown revision"
    return f"{revision}{' with uncommitted changes' if git.get('dirty') else ''}"


def code_changed(recorded: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether `now` (git_info) is other code than `recorded`: another revision, or the same with its tracked files
    changed where they were not (or no longer changed where they were). Nothing recorded and nothing now (no
    checkout either time) is no change that can be told."""
    if not recorded.get("revision") and not now.get("revision"):
        return False
    return recorded.get("revision") != now.get("revision") or bool(recorded.get("dirty")) != bool(now.get("dirty"))


def note_resumed_revision(manifest: dict[str, Any], how: str, now: dict[str, Any] | None = None) -> str | None:
    """The warning line when this code (`now`, git_info by default) is not the code the run began under, recording
    the resume in `manifest` (changed in place: the caller writes it); None, and nothing recorded, when it is."""
    recorded = manifest.get("git") if isinstance(manifest.get("git"), dict) else {}
    now = run_manifest.git_info() if now is None else now
    if not code_changed(recorded, now):
        return None
    entry = {"revision": now.get("revision", ""), "dirty": bool(now.get("dirty")), "command": how,
             "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    earlier = manifest.get(RESUMED_UNDER)
    manifest[RESUMED_UNDER] = [*(earlier if isinstance(earlier, list) else []), entry]
    return (f"this run began under revision {_state(recorded)} and goes on under {_state(now)}: with this code's "
            f"defaults, not those it began with (recorded in its manifest, {RESUMED_UNDER})")


def note_code_change(run_dir: Path, how: str) -> str | None:
    """A resume under other code than the run began with (a git pull since), recorded in its manifest: the warning
    line, or None when the code is the recorded one (the manifest then left as it is)."""
    from .rundir import read_manifest, write_manifest

    manifest = read_manifest(run_dir)
    if (line := note_resumed_revision(manifest, how)) is not None:
        write_manifest(run_dir, manifest)
    return line
