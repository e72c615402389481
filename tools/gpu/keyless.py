"""API keys erased from a GPU worker's or referee's memory, not only from os.environ.

On a GPU with pageable memory access (HMM on recent Linux kernels with the open driver, or ATS on Grace Hopper:
CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, read by limits.py) a kernel reads its process's ordinary host memory by
address. Deleting a key from os.environ leaves its bytes where the process started (the C environment block) and in
the bytes object os.environ held, until something else happens to overwrite them. `erase_secrets()` overwrites both in
place, then deletes the names. The pool's fork server imports `ptxbench.tools.gpu.keyless_server` first, so every
worker forked from it starts without them; entry.py calls it again in each worker and referee (the 'spawn' method).
Standard library only: it runs before torch is imported.
"""
from __future__ import annotations

import ctypes
import os

from ..redact import is_secret_name, registered_names

_BYTES_DATA = bytes.__basicsize__ - 1  # offset of a bytes object's data in CPython (ob_sval)


def _secret_names(data: dict[bytes, bytes]) -> set[bytes]:
    """Names that look like secrets or were registered (--api-key-env), and any variable holding one of their values."""
    registered = registered_names()
    named = {k for k in data if is_secret_name(os.fsdecode(k), registered)}
    values = {data[k] for k in named if data[k]}
    return named | {k for k, v in data.items() if v in values}


def _erase_c_environment(names: set[bytes]) -> int:
    """Zero the value of each NAME=value string of the C `environ` array, in place. Returns how many were erased. Only
    each entry's name is copied into Python (a copy of the whole entry, freed, would leave the value in the heap)."""
    libc = ctypes.CDLL(None)
    libc.strlen.restype, libc.strlen.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
    libc.memchr.restype, libc.memchr.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    environ = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
    erased, i = 0, 0
    while environ[i]:
        address = environ[i]
        size = libc.strlen(address)
        sep = libc.memchr(address, ord("="), size)
        if sep and sep + 1 < address + size and ctypes.string_at(address, sep - address) in names:
            ctypes.memset(sep + 1, 0, address + size - sep - 1)
            erased += 1
        i += 1
    return erased


def _erase_bytes(value: bytes) -> None:
    if len(value) > 1:  # the empty and one-byte objects are shared singletons (and no secret)
        ctypes.memset(id(value) + _BYTES_DATA, 0, len(value))


def erase_secrets() -> list[str]:
    """Overwrite every secret environment value in this process's memory, then delete the variables. Returns their
    names. Only for processes that need no key: the GPU workers, the referee, the fork server they come from."""
    data = os.environ._data  # type: ignore[attr-defined]  # posix: the bytes dict the interpreter built at start
    names = _secret_names(data)
    _erase_c_environment(names)
    for name in names:
        _erase_bytes(data[name])
    for name in names:
        os.unsetenv(name)
        del data[name]
    return sorted(os.fsdecode(n) for n in names)
