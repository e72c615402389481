"""Content-addressed compile cache: the cubin and the CompileResult JSON of each compile.

key = sha256 of (source, language, arch, options, the toolchain's identity: each tool's path and
version), so another ptxas, a new version or a changed flag never serves a stale result, and a hit
names the ptxas that made it. Entries live in $PTXBENCH_CACHE (default ~/.cache/ptxbench/<install>,
one folder per installed copy of ptxbench and Python prefix, so installs never share entries) under
compile/<key[:2]>/<key>/. Writers put each file in place with a temp file + os.replace and write
result.json last, so concurrent compiles of the same source never expose a half-written entry.

Bounded by bytes, least recently used first ($PTXBENCH_CACHE_MAX_BYTES, default 4 GiB; 0 or none:
unbounded): a hit touches result.json, so an entry's newest file time is its last use. A put walks the
entries only now and then (its process wrote a twentieth of the bound since its last walk, or no
process walked for PRUNE_EVERY_S), and then removes the oldest until the cache is under 90% of the
bound. An entry used in the last GRACE_S is never removed (a process may be about to load its cubin by
path), so a busy cache may stand over the bound for a while. A removal renames the folder aside and
then deletes it: a reader finds a whole entry or a miss, never half of one. Just before the rename it
checks the entry again: one used since the walk stays where it is. A use between that check and the
rename is seen after it, and the entry renamed back; its cubin's path is gone for those microseconds
only (tools/evaluate.py compiles once more should its read of the cubin fall there).
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .atomic import atomic_write
from .held_signals import signals_held
from .redact import scrub_text
from .results import CompileResult

ENV_CACHE = "PTXBENCH_CACHE"
ENV_MAX_BYTES = "PTXBENCH_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 * 2**30
# Longer than an evaluation takes from its compile to its profile and sanitizer runs, which read the cubin by path.
GRACE_S = 30 * 60
PRUNE_EVERY_S = 5 * 60
WALK_GAP_S = 10  # a walk this recent (another process's) stands for this one
LOW_WATER = 0.9
MARKER = ".last-walk"
ASIDE = ".evict-"
ASIDE_AGE_S = 60  # a folder renamed aside this long ago is a killed removal's leftover, not one under way
# Bumped when the meaning of a stored result changes (e.g. the log parser learns new fields).
CACHE_FORMAT = "compile-v8"  # v3: KernelResources.barriers; v4: spills_after_dec / _inc; v5: undefined functions refused;
# v6: PTX lines counted at \n only (a form feed had turned the rest of a comment into assembled code); v7: compiler
# messages cut at 600 characters; v8: compiler messages name no host folder
FROM_ENV = "env"
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_written: dict[Path, int] = {}  # bytes this process put under each root since it last walked it
_aside = itertools.count()


def install_tag() -> str:
    """This install: where the package lives and which Python runs it (two checkouts or venvs differ)."""
    where = f"{Path(__file__).resolve().parent}|{sys.prefix}"
    return hashlib.sha256(where.encode()).hexdigest()[:12]


def cache_root() -> Path:
    """$PTXBENCH_CACHE, a '~' in it the home folder (a unit file or .env hands it over unexpanded: it made a folder
    named '~' in the working directory), else the per-install folder under ~/.cache/ptxbench."""
    given = os.environ.get(ENV_CACHE)
    return Path(given).expanduser() if given else Path.home() / ".cache" / "ptxbench" / install_tag()


def parse_size(text: str) -> int | None:
    """Bytes of '4G', '500MiB', '1.5g', '123456' (K/M/G/T are powers of 1024); None for '0' or 'none' (unbounded)."""
    t = text.strip().lower()
    if t in ("0", "none", "unbounded"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?", t)
    if m is None:
        raise ValueError(f"${ENV_MAX_BYTES}={text!r} is not a size (bytes, or a number with K, M, G or T; "
                         "0 or none: unbounded)")
    n = float(m[1]) * _UNITS[m[2]]
    return max(int(n), 1) if n else None


def size_bound() -> int | None:
    """The bound $PTXBENCH_CACHE_MAX_BYTES sets (None: unbounded); one that is no size warns once and is the default."""
    raw = os.environ.get(ENV_MAX_BYTES, "")
    if not raw.strip():
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(raw)
    except ValueError as exc:
        _warn_once(f"{exc}: the default {DEFAULT_MAX_BYTES / 2**30:g} GiB applies")
        return DEFAULT_MAX_BYTES


@functools.cache
def _warn_once(line: str) -> None:
    print(f"ptxbench: {line}", file=sys.stderr)


def cache_key(source: str, language: str, arch: str, options: list[str] | dict, tools: dict[str, str]) -> str:
    """`tools`: tool -> 'path (version)' (Toolchain.tools()), the identity of what compiles."""
    blob = json.dumps(
        {"format": CACHE_FORMAT, "source": source, "language": language, "arch": arch, "options": options, "tools": tools},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class Entry:
    path: Path
    bytes: int
    used: float  # the newest file time: the last put or hit


@dataclass
class Pruned:
    removed: int  # entries
    freed: int  # bytes
    entries: int  # left
    bytes: int  # left
    in_use: int  # entries used within the grace period (never removed)


class CompileCache:
    """`max_bytes`: the bound (None: unbounded; FROM_ENV: $PTXBENCH_CACHE_MAX_BYTES); `grace_s`: an entry used this
    recently is never removed."""

    def __init__(self, root: str | Path | None = None, max_bytes: int | None | str = FROM_ENV, grace_s: float = GRACE_S):
        self.root = Path(root) if root is not None else cache_root()
        self.max_bytes = size_bound() if max_bytes == FROM_ENV else max_bytes
        self.grace_s = grace_s

    def entry_dir(self, key: str) -> Path:
        return self.root / "compile" / key[:2] / key

    def get(self, key: str) -> CompileResult | None:
        """The stored result with cached=True, or None (a missing, unreadable or cubin-less entry is a miss, and so is
        one removed while it was read)."""
        d = self.entry_dir(key)
        try:
            result = CompileResult.model_validate_json((d / "result.json").read_text())
        except (OSError, ValueError):
            return None
        if result.status == "ok":
            cubin = d / "kernel.cubin"
            if not cubin.is_file():
                return None
            result.cubin_path = str(cubin)
        # the use is marked before a pruner's rename (it then sees the use and puts the entry back) or fails after it
        if not _touch(d / "result.json"):
            return None
        return result.model_copy(update={"cached": True})

    def put(self, key: str, result: CompileResult, cubin: bytes | None = None, ptx: str | None = None) -> CompileResult:
        """Store the files, then the result; returns the result with cubin_path pointing into the cache."""
        d = self.entry_dir(key)
        written = 0
        # a Ctrl-C inside pydantic's serializer came out as its error (a crash, not a stop): held until the entry is
        # whole, then raised
        with signals_held():
            if ptx is not None:  # model text: a key it echoes in a comment never reaches the disk
                written += _write(d / "kernel.ptx", scrub_text(ptx).encode())
            if cubin is not None:
                written += _write(d / "kernel.cubin", cubin)
                result = result.model_copy(update={"cubin_path": str(d / "kernel.cubin")})
            record = result.model_copy(update={"cached": False}).model_dump_json(indent=1)
            written += _write(d / "result.json", scrub_text(record).encode())  # compiler logs quote the model's lines
            if cubin is not None and not (d / "kernel.cubin").is_file():  # an old entry, rewritten, was removed meanwhile
                _write(d / "kernel.cubin", cubin)
        self._after_put(written)
        return result

    def ptx_path(self, key: str) -> Path | None:
        p = self.entry_dir(key) / "kernel.ptx"
        return p if p.is_file() else None

    # -- the bound -----------------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        """Every entry, least recently used first (one walk of the tree; leftovers of a killed removal are deleted)."""
        found = []
        for shard in _subdirs(self.root / "compile"):
            for d in _subdirs(shard.path, with_aside=True):
                if d.name.startswith(ASIDE):
                    _sweep(d)
                elif (entry := _entry(Path(d.path))) is not None:
                    found.append(entry)
        return sorted(found, key=lambda e: e.used)

    def usage(self) -> Pruned:
        """What the cache holds now (one walk), as a prune that removed nothing reports it."""
        entries = self.entries()
        cutoff = time.time() - self.grace_s
        return Pruned(0, 0, len(entries), sum(e.bytes for e in entries), sum(e.used >= cutoff for e in entries))

    def prune(self, target: int | None = None) -> Pruned:
        """Remove the least recently used entries not used within the grace period until the cache holds at most
        `target` bytes (default: 90% of the bound, and only once the bound is passed; 0 empties it)."""
        _mark(self.root)
        _written[self.root] = 0
        entries = self.entries()
        total = sum(e.bytes for e in entries)
        if target is None:
            target = total if self.max_bytes is None or total <= self.max_bytes else int(self.max_bytes * LOW_WATER)
        cutoff = time.time() - self.grace_s
        removed = freed = 0
        for e in entries:
            if total - freed <= target or e.used >= cutoff:  # oldest first: the rest are newer still
                break
            if _remove(e.path, cutoff):
                removed, freed = removed + 1, freed + e.bytes
        return Pruned(removed, freed, len(entries) - removed, total - freed, sum(e.used >= cutoff for e in entries))

    def _after_put(self, written: int) -> None:
        if self.max_bytes is None:
            return
        _written[self.root] = _written.get(self.root, 0) + written
        age = _marker_age(self.root)
        if age >= WALK_GAP_S and (age >= PRUNE_EVERY_S or _written[self.root] >= self.max_bytes // 20):
            self.prune()


def _write(path: Path, data: bytes) -> int:
    """atomic_write, once more if the entry's folder was renamed aside (an old entry removed) while it was written."""
    try:
        atomic_write(path, data)
    except FileNotFoundError:
        atomic_write(path, data)
    return len(data)


def _touch(path: Path) -> bool:
    """Mark a use; False only when the file is gone (a read-only cache still serves its entries)."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    except OSError:
        pass
    return True


def _subdirs(path: Path, with_aside: bool = False) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as it:
            return [d for d in it if d.is_dir(follow_symlinks=False) and (with_aside or not d.name.startswith("."))]
    except OSError:  # gone, or not a folder
        return []


def _entry(d: Path) -> Entry | None:
    try:
        used, size = d.stat().st_mtime, 0
        with os.scandir(d) as it:
            for f in it:
                st = f.stat(follow_symlinks=False)
                used, size = max(used, st.st_mtime), size + st.st_size
    except OSError:  # removed while walked
        return None
    return Entry(d, size, used)


def _remove(d: Path, cutoff: float) -> bool:
    """Rename the entry aside, then delete it; one used since the walk (a hit's touch, a put) is kept.

    Used before the rename, it is never moved: a walk of many entries may be seconds old by the time its removals
    reach this one, and a hit meanwhile would otherwise see its cubin's path vanish until the entry is put back.
    The check after the rename catches the use that falls between the two (microseconds: the entry is put back)."""
    if (now := _entry(d)) is None or now.used >= cutoff:
        return False
    aside = d.with_name(f"{ASIDE}{d.name}-{os.getpid()}-{next(_aside)}")
    try:
        os.rename(d, aside)
    except OSError:  # gone already (another pruner), or not ours to remove
        return False
    if (again := _entry(aside)) is not None and again.used >= cutoff:
        try:
            os.rename(aside, d)
            return False
        except OSError:  # a writer made the entry anew meanwhile: theirs stands
            pass
    shutil.rmtree(aside, ignore_errors=True)
    return True


def _sweep(aside: os.DirEntry) -> None:
    """Delete what a removal killed before its rmtree left aside."""
    try:
        if time.time() - aside.stat(follow_symlinks=False).st_ctime > ASIDE_AGE_S:
            shutil.rmtree(aside.path, ignore_errors=True)
    except OSError:
        pass


def _marker_age(root: Path) -> float:
    try:
        return time.time() - (root / "compile" / MARKER).stat().st_mtime
    except OSError:
        return float("inf")


def _mark(root: Path) -> None:
    """Say that a walk starts now (other processes skip theirs for WALK_GAP_S)."""
    try:
        (root / "compile").mkdir(parents=True, exist_ok=True)
        (root / "compile" / MARKER).touch()
    except OSError:  # a read-only cache: nothing to prune anyway
        pass
