"""Keep API keys out of everything ptxbench writes: trajectories, checkpoints, manifests, logs, the compile
cache, exports, error messages (used by tools/ and agent/ alike, so it lives in tools/).

Keys are read from the environment only; any environment value whose name looks like a secret is
replaced by '***' wherever it would appear in recorded text.
"""
from __future__ import annotations

import os
import re
from typing import Any

from pydantic import BaseModel

_SECRET_NAME = re.compile(r"(API_?KEY|TOKEN$|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)
# Field names whose string values are masked outright ("prompt_tokens" and friends are counts, not secrets).
_SECRET_FIELD = re.compile(r"(api_?key|secret|password|credential|authorization|(^|_)token$)", re.IGNORECASE)
# Provider key shapes, in case a key arrives through something other than the environment (an error, a config, a
# recorded message). A shape is also kernel code (`sk-k_tile_begin-k_tiles_per_split_rounded` is a split-K
# subtraction, `hf_accumulatorFragmentsForWarpTile` a name), so the model's reply, whose kernel is compiled and saved
# as written, is masked by the exact keys of this machine only (mask_strings(shapes=False)). Every provider's key is
# longer than a short name: OpenAI's sk- 48 or sk-proj- 150 characters, Anthropic's sk-ant-api03- 95, DeepSeek's
# sk- 32, Hugging Face's hf_ 34, xAI's xai- 80.
_KEY_SHAPES = re.compile(r"\b(sk-[A-Za-z0-9_\-]{32,}|AIza[0-9A-Za-z_\-]{20,}|hf_[A-Za-z0-9]{30,}|xai-[A-Za-z0-9]{32,})\b")
_KEY_PREFIXES = ("sk-", "AIza", "hf_", "xai-")  # searched first: a substring test is many times faster than the regex


MASKED = "***"  # what a key is replaced by

# Variables named by --api-key-env: masked whatever their name looks like (LLM_KEY, MY_VAR ...).
_REGISTERED: set[str] = set()


# The registered names travel to the processes started later (the GPU workers' fork server erases those variables too).
REGISTERED_ENV = "PTXBENCH_KEY_ENVS"  # (a name that is no secret itself: its value is names, not keys)


def register_secret_env(name: str | None) -> None:
    """Mask the value of environment variable `name` from now on (the --api-key-env variable)."""
    if name:
        _REGISTERED.add(name)
        os.environ[REGISTERED_ENV] = ",".join(sorted(registered_names() | {name}))


def registered_names() -> set[str]:
    """The --api-key-env names registered here or by the process that started this one (REGISTERED_ENV)."""
    return _REGISTERED | {n for n in os.environ.get(REGISTERED_ENV, "").split(",") if n}


def is_secret_name(name: str, registered: set[str] | None = None) -> bool:
    """`registered`: registered_names() once for a loop over many names (it parses the environment)."""
    return bool(_SECRET_NAME.search(name)) or name in (registered_names() if registered is None else registered)


def without_secrets(env: dict[str, str]) -> dict[str, str]:
    """`env` without the variables that hold keys: secret-looking or registered names, and any variable whose
    value is one of those keys (for the processes that run a candidate: the GPU workers, ncu, the sanitizer)."""
    registered = registered_names()
    secret = {k for k in env if is_secret_name(k, registered)}
    keys = {env[k] for k in secret if env[k]}
    return {k: v for k, v in env.items() if k not in secret and v not in keys}


def secret_values() -> list[str]:
    registered = registered_names()
    values = {v for k, v in os.environ.items() if is_secret_name(k, registered) and v and len(v) >= 8}
    return sorted(values, key=len, reverse=True)


def mask_strings(obj: Any, shapes: bool = True) -> Any:
    """`obj` with secrets masked in every string, containers keeping their types (for checkpoint state,
    whose tuples and objects must come back as they were); other objects are returned as they are.
    `shapes=False` masks the keys this machine holds only, not strings of a key's shape: for a model's reply, whose
    kernel is compiled and saved as written (`sk-` and 32 identifier characters is also code: a subtraction chain)."""
    return _mask(obj, secret_values(), shapes)  # the environment read once per object, not once per string in it


def _mask(obj: Any, values: list[str], shapes: bool = True) -> Any:
    if isinstance(obj, str):
        return scrub_text(obj, values, shapes)
    if isinstance(obj, dict):
        return type(obj)((k, _mask(v, values, shapes)) for k, v in obj.items()) if type(obj) is dict else obj
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(_mask(v, values, shapes) for v in obj)
    if isinstance(obj, BaseModel):  # typed state (an EvalResult): masked through its fields, type kept
        return type(obj).model_validate(_mask(obj.model_dump(), values, shapes))
    return obj


def scrub_text(text: str, values: list[str] | None = None, shapes: bool = True) -> str:
    """`values`: secret_values() once for many strings (it walks the environment); `shapes`: see mask_strings."""
    for value in secret_values() if values is None else values:
        if value in text:
            text = text.replace(value, MASKED)
    return _KEY_SHAPES.sub(MASKED, text) if shapes and any(p in text for p in _KEY_PREFIXES) else text


def scrub(obj: Any) -> Any:
    """A copy of a JSON-like object with secrets masked in every string (and keys named like secrets)."""
    return _scrub(obj, secret_values())


def _scrub(obj: Any, values: list[str]) -> Any:
    if isinstance(obj, str):
        return scrub_text(obj, values)
    if isinstance(obj, dict):
        return {k: ("***" if isinstance(k, str) and isinstance(v, str) and v and _SECRET_FIELD.search(k) else _scrub(v, values))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_scrub(v, values) for v in obj]
    return obj
