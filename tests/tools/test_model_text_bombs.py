"""Short model text that asks a compiler for a huge output or a long run: each gets a classified compile error, quickly,
and nothing of its size reaches the harness's memory, the compile cache or a GPU worker."""
from __future__ import annotations

import time

import pytest

from ptxbench.tools import compile as compile_module
from ptxbench.tools.compile import compile_source

PTX_HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
PTX_KERNEL = ".visible .entry k(.param .u64 a)\n{\nret;\n}\n"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _cache_bytes(root) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def test_an_initialised_global_array_past_the_cubin_limit_is_a_compile_error(private_cache):
    # 70 characters of PTX ask ptxas for a 20 MB cubin; up to 127 MB (the jail's file-size limit) was read, cached and
    # sent to the GPU
    source = PTX_HEAD + ".global .align 1 .b8 table[20000000] = {1, 2};\n" + PTX_KERNEL
    start = time.perf_counter()
    result = compile_source(source, "ptx", "sm_90a")
    assert result.status == "error" and result.cubin_path is None, result
    assert "cubin" in result.errors[0].message and "16 MB" in result.errors[0].message, result.errors
    assert _cache_bytes(private_cache) < 1_000_000
    assert time.perf_counter() - start < 20
    again = compile_source(source, "ptx", "sm_90a")  # the verdict is the file's: cached as such
    assert again.cached and again.errors == result.errors


def test_a_small_initialised_table_still_compiles():
    result = compile_source(PTX_HEAD + ".global .align 1 .b8 table[65536] = {1, 2};\n" + PTX_KERNEL, "ptx", "sm_90a")
    assert result.status == "ok", result.errors


def test_generated_ptx_past_its_limit_is_a_compile_error_and_never_cached(private_cache, monkeypatch):
    # a limit of 64 KB stands for the real 32 MB: a 100 KB table compiles in a second where a 32 MB one takes long
    monkeypatch.setattr(compile_module, "MAX_GENERATED_PTX_BYTES", 64 * 1024)
    table = ", ".join(str(i % 251) for i in range(30_000))
    source = f'__device__ unsigned char table[] = {{{table}}};\nextern "C" __global__ void k(char* o) {{ o[0] = table[threadIdx.x]; }}\n'
    result = compile_source(source, "cuda", "sm_90a")
    assert result.status == "error" and "the PTX nvcc made" in result.errors[0].message, result.errors
    assert not list(private_cache.rglob("kernel.ptx")) and not list(private_cache.rglob("kernel.cubin"))
