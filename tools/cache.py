"""Content-addressed compile cache: the cubin and the CompileResult JSON of each compile.

key = sha256 of (source, language, arch, options, the toolchain's identity: each tool's path and
version), so another ptxas, a new version or a changed flag never serves a stale result, and a hit
names the ptxas that made it. Entries live in $PTXBENCH_CACHE (default ~/.cache/ptxbench/<install>,
one folder per installed copy of ptxbench and Python prefix, so installs never share entries) under
compile/<key[:2]>/<key>/. Writers put each file in place with a temp file + os.replace and write
result.json last, so concurrent compiles of the same source never expose a half-written entry.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from .atomic import atomic_write
from .redact import scrub_text
from .results import CompileResult

ENV_CACHE = "PTXBENCH_CACHE"
# Bumped when the meaning of a stored result changes (e.g. the log parser learns new fields).
CACHE_FORMAT = "compile-v8"  # v3: KernelResources.barriers; v4: spills_after_dec / _inc; v5: undefined functions refused;
# v6: PTX lines counted at \n only (a form feed had turned the rest of a comment into assembled code); v7: compiler
# messages cut at 600 characters; v8: compiler messages name no host folder


def install_tag() -> str:
    """This install: where the package lives and which Python runs it (two checkouts or venvs differ)."""
    where = f"{Path(__file__).resolve().parent}|{sys.prefix}"
    return hashlib.sha256(where.encode()).hexdigest()[:12]


def cache_root() -> Path:
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "ptxbench" / install_tag())


def cache_key(source: str, language: str, arch: str, options: list[str] | dict, tools: dict[str, str]) -> str:
    """`tools`: tool -> 'path (version)' (Toolchain.tools()), the identity of what compiles."""
    blob = json.dumps(
        {"format": CACHE_FORMAT, "source": source, "language": language, "arch": arch, "options": options, "tools": tools},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class CompileCache:
    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else cache_root()

    def entry_dir(self, key: str) -> Path:
        return self.root / "compile" / key[:2] / key

    def get(self, key: str) -> CompileResult | None:
        """The stored result with cached=True, or None (a missing, unreadable or cubin-less entry is a miss)."""
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
        return result.model_copy(update={"cached": True})

    def put(self, key: str, result: CompileResult, cubin: bytes | None = None, ptx: str | None = None) -> CompileResult:
        """Store the files, then the result; returns the result with cubin_path pointing into the cache."""
        d = self.entry_dir(key)
        if ptx is not None:  # model text: a key it echoes in a comment never reaches the disk
            atomic_write(d / "kernel.ptx", scrub_text(ptx).encode())
        if cubin is not None:
            atomic_write(d / "kernel.cubin", cubin)
            result = result.model_copy(update={"cubin_path": str(d / "kernel.cubin")})
        record = result.model_copy(update={"cached": False}).model_dump_json(indent=1)
        atomic_write(d / "result.json", scrub_text(record).encode())  # compiler logs quote the model's lines
        return result

    def ptx_path(self, key: str) -> Path | None:
        p = self.entry_dir(key) / "kernel.ptx"
        return p if p.is_file() else None
