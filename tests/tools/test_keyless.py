"""API keys erased from the memory of the processes that run candidates (tools/gpu/keyless.py), not only from
os.environ: on a GPU with pageable memory access a kernel reads its process's host memory by address.

Each check runs in a fresh interpreter that scans its own readable memory (/proc/self/mem) for the key. The key never
appears whole in that process except in its environment: the scanner is handed it reversed and builds the needle in a
buffer whose address it skips."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

KEY = "sk-test" + "Q7v" * 12  # a provider-shaped key, fake
REGISTERED = "ptx-cred-" + "Zx9" * 8  # the value of a variable named by --api-key-env (a name that looks like nothing)

SCANNER = textwrap.dedent('''
    import ctypes, os, re, sys

    def hits(reversed_values):
        """Addresses where any of the values (given reversed) occurs in this process's readable memory."""
        buf = bytearray(1 << 20)
        skip = [(ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf)), len(buf))]
        needles = []
        for r in reversed_values:
            needle = bytearray(r.encode())
            needle.reverse()  # in place: a reversed bytes object, freed, would leave the key in the heap itself
            skip.append((ctypes.addressof((ctypes.c_char * len(needle)).from_buffer(needle)), len(needle)))
            needles.append(needle)
        found = []
        with open("/proc/self/maps") as f:
            maps = f.read().splitlines()
        mem = open("/proc/self/mem", "rb", buffering=0)
        for line in maps:
            span, perms = line.split()[:2]
            if "r" not in perms:
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            at = lo
            while at < hi:
                n = min(len(buf), hi - at)
                try:
                    mem.seek(at)
                    got = mem.readinto(memoryview(buf)[:n])
                except (OSError, ValueError, OverflowError):
                    break
                for needle in needles:
                    start = 0
                    while (i := buf.find(needle, start, got)) >= 0:
                        addr = at + i
                        if not any(s <= addr < s + size for s, size in skip):
                            found.append(addr)
                        start = i + 1
                at += n
        return found
''')


def run(tmp_path: Path, body: str, env_extra: dict) -> str:
    (tmp_path / "scanner.py").write_text(SCANNER)
    script = f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + textwrap.dedent(body)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "LLM_ENDPOINT_CRED")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


ENV = {"OPENAI_API_KEY": KEY, "LLM_ENDPOINT_CRED": REGISTERED, "PTXBENCH_KEY_ENVS": "LLM_ENDPOINT_CRED"}
ARGS = f"[{KEY[::-1]!r}, {REGISTERED[::-1]!r}]"


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs /proc/self/mem (Linux)")
def test_deleting_a_key_from_os_environ_leaves_it_in_memory(tmp_path):
    """The control: what the workers did before. The scan finds the keys, so it can fail."""
    out = run(tmp_path, f"""
        import os
        from scanner import hits
        for name in ("OPENAI_API_KEY", "LLM_ENDPOINT_CRED"):
            del os.environ[name]
        print(len(hits({ARGS})))
    """, ENV)
    assert int(out) >= 2


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs /proc/self/mem (Linux)")
def test_erase_secrets_leaves_no_copy_in_memory(tmp_path):
    out = run(tmp_path, f"""
        import os
        from ptxbench.tools.gpu.keyless import erase_secrets
        names = erase_secrets()
        from scanner import hits
        print(names, "OPENAI_API_KEY" in os.environ, len(hits({ARGS})))
    """, ENV)
    assert out == "['LLM_ENDPOINT_CRED', 'OPENAI_API_KEY'] False 0"


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs /proc/self/mem (Linux)")
def test_erase_secrets_copies_no_long_value_into_the_heap(tmp_path):
    """Walking the C environment copies only each entry's name into Python: a copy of a whole NAME=value entry (and of
    its value), freed, stays in the heap where nothing reuses it soon (a long bearer token: malloc'd, not pymalloc'd)."""
    keys = {f"SERVICE_{n}_TOKEN": f"tok{n}-" + ("Lq4w" * 1000)[:n] for n in (300, 700, 2000, 5000)}
    args = "[" + ", ".join(repr(v[::-1]) for v in keys.values()) + "]"
    out = run(tmp_path, f"""
        import os
        from ptxbench.tools.gpu.keyless import erase_secrets
        names = erase_secrets()
        from scanner import hits
        print(len(names), len(hits({args})))
    """, keys)
    assert out == f"{len(keys)} 0"


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs /proc/self/mem (Linux)")
def test_a_worker_forked_from_the_pools_fork_server_starts_without_the_keys(tmp_path):
    """The fork server imports keyless_server before anything else (pool.PRELOAD's first module): a worker forked from
    it finds no key in its environment or anywhere in its memory."""
    (tmp_path / "child.py").write_text(textwrap.dedent(f"""
        import os

        def report(queue):
            from scanner import hits
            queue.put((os.environ.get("OPENAI_API_KEY"), len(hits({ARGS}))))
    """))
    out = run(tmp_path, """
        import multiprocessing as mp
        from ptxbench.tools.gpu.pool import PRELOAD
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload([PRELOAD[0]])
        import child
        q = ctx.Queue()
        p = ctx.Process(target=child.report, args=(q,))
        p.start()
        print(q.get(timeout=120))
        p.join()
    """, ENV)
    assert out == "(None, 0)"


def test_registered_key_variables_reach_the_processes_started_later(monkeypatch):
    from ptxbench.tools import redact

    monkeypatch.setattr(redact, "_REGISTERED", set())
    monkeypatch.delenv(redact.REGISTERED_ENV, raising=False)
    redact.register_secret_env("MY_ENDPOINT_VAR")
    assert os.environ[redact.REGISTERED_ENV] == "MY_ENDPOINT_VAR"
    monkeypatch.setattr(redact, "_REGISTERED", set())  # a process that never called register_secret_env
    assert redact.is_secret_name("MY_ENDPOINT_VAR") and not redact.is_secret_name(redact.REGISTERED_ENV)
