"""`ptxbench cache`: the compile cache's folder, entries and size against its bound; `--prune` / `--clear` free room.

    ptxbench cache            # where it is, how many entries, how many bytes, the bound ($PTXBENCH_CACHE_MAX_BYTES)
    ptxbench cache --prune    # down to 90% of the bound now, as a compile does now and then by itself
    ptxbench cache --clear    # every entry not used in the last 30 minutes (a running bench may be about to load those)
"""
from __future__ import annotations

import json
import os

import typer

from .application import app


@app.command("cache")
def cache(
    prune: bool = typer.Option(False, "--prune", help="remove the least recently used entries until under 90% of the bound"),
    clear: bool = typer.Option(False, "--clear", help="remove every entry not used within the grace period"),
    as_json: bool = typer.Option(False, "--json", help="print the figures as JSON"),
) -> None:
    """Show the compile cache (folder, entries, bytes, bound); --prune or --clear frees room."""
    from ptxbench.tools.cache import ENV_CACHE, ENV_MAX_BYTES, CompileCache, parse_size

    from .inputs import BadInput

    if prune and clear:
        raise BadInput("--prune and --clear are two different requests: give one")
    if os.environ.get(ENV_MAX_BYTES, "").strip():  # a compile warns and goes on with the default; here it is refused
        try:
            parse_size(os.environ[ENV_MAX_BYTES])
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    store = CompileCache()
    for p in (store.root, *store.root.parents):  # a file there: it read as an empty cache ("0 entries"), and --prune
        if p.exists() and not p.is_dir():      # or --clear removed nothing from it without a word
            given = f" (${ENV_CACHE})" if os.environ.get(ENV_CACHE) else ""
            raise BadInput(f"the compile cache {store.root}{given}: {p} is a file, not a folder; point ${ENV_CACHE} at "
                           "a folder")
    now = store.prune(target=0 if clear else None) if prune or clear else store.usage()  # one walk of the entries
    if as_json:
        typer.echo(json.dumps({"folder": str(store.root), "entries": now.entries, "bytes": now.bytes,
                               "max_bytes": store.max_bytes, "grace_s": store.grace_s, "in_use": now.in_use,
                               "removed": now.removed, "freed": now.freed}, indent=2))
        return
    bound_text = f"bound {_size(store.max_bytes)}" if store.max_bytes is not None else "unbounded"
    if prune or clear:
        typer.echo(f"removed {now.removed} {'entry' if now.removed == 1 else 'entries'} ({_size(now.freed)})")
    typer.echo(f"compile cache {store.root}: {now.entries} entries, {_size(now.bytes)} ({bound_text}, "
               f"${ENV_MAX_BYTES}); {now.in_use} used in the last {store.grace_s / 60:g} min (never removed)")


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"
