"""What a published dataset keeps of a path on the exporting host: the part that names the record, not the host.

A replay's model string (`replay//home/alice/runs/x/trajectories/<id>/trajectory.jsonl`), a model served from a
local folder (`hosted_vllm//home/alice/ckpt/sft-1`), the run folders given to `export` and an `hf:<folder>` tokenizer
were written into rows and export_manifest.json as typed: a published dataset told a username and a directory layout.
Each is cut to the names a reader can match against `provenance.run`.
The teacher's server (`--teacher-api-base`) likewise told a host, and any user, password or token in its URL:
`api_base_name` keeps its scheme, and a public provider's host alone.
"""
from __future__ import annotations

import os
from pathlib import PurePath
from urllib.parse import urlsplit

from ..records.rundir import run_name  # noqa: F401  (the manifest's runs and `provenance.run`; "." names the folder)


def from_run(path: str) -> str:
    """`path` from its run folder's name on: `<run>/trajectories/<id>/<file>` for a trajectory's log or folder, else
    its last name (a run folder, or a log outside any run). Always this trailing part, not a path relative to some
    root: a row names its run by the folder's name (`provenance.run`), and a replay's source is then the same string
    wherever the replay or the export ran ("." or ".." with no name is kept as it is: it tells nothing either)."""
    pure = PurePath(path)
    parts = pure.parts[1:] if pure.anchor else pure.parts
    at = max((i for i, part in enumerate(parts) if part == "trajectories" and i >= 1), default=None)
    if at is not None:
        return "/".join(parts[at - 1:])
    return parts[-1] if parts else path


def replay_model(model: str) -> str:
    """A `replay/<path>` model string with its path cut by from_run (another model string as it is)."""
    return "replay/" + from_run(model.removeprefix("replay/")) if model.startswith("replay/") else model


def model_name(model: str) -> str:
    """A `provider/<served name>` model string whose served name is a folder on the host (vLLM serves a checkpoint
    under its path unless told otherwise: `hosted_vllm//home/alice/ckpt/sft-1`) as `provider/<folder's name>`;
    a `replay/<path>` as replay_model cuts it; any other (`hosted_vllm/Qwen/Qwen3-8B`) as it is."""
    if model.startswith("replay/"):
        return replay_model(model)
    provider, slash, served = model.partition("/")
    if slash and served.startswith(("/", "~", "./")):  # vllm serve ./ckpt serves it as "./ckpt"
        return f"{provider}/{PurePath(served).name or served}"
    return model


def tokenizer_name(spec: str) -> str:
    """An `hf:<folder>` tokenizer as `hf:<folder's name>` (a hub name such as `hf:Qwen/Qwen3-8B` as it is: a name that
    is no folder here, as hf_tokenizer.load reads it); `estimate` and `tiktoken:<encoding>` as they are."""
    if not spec.startswith("hf:"):
        return spec
    name = spec.removeprefix("hf:")
    folder = os.path.expanduser(name)
    local = os.path.isabs(folder) or os.path.exists(folder)
    return f"hf:{os.path.basename(os.path.normpath(os.path.abspath(folder)))}" if local else spec


# Public providers' OpenAI-compatible endpoints: a host any user of the provider types, naming no one's machine.
PUBLIC_API_HOSTS = frozenset({
    "api.openai.com", "api.anthropic.com", "openrouter.ai", "api.together.xyz", "api.together.ai", "api.deepseek.com",
    "api.groq.com", "api.fireworks.ai", "api.mistral.ai", "generativelanguage.googleapis.com", "api.x.ai",
    "api.deepinfra.com", "integrate.api.nvidia.com", "api.cerebras.ai", "api.perplexity.ai",
})


def api_base_name(url: str) -> str:
    """`--teacher-api-base` as a published manifest keeps it: the scheme and, for a public provider (PUBLIC_API_HOSTS),
    its host; any other server as `<scheme>://<host>` (its address names the exporter's machines or organisation: a
    lab's vLLM box, an Azure resource). Never a user or password, port, path (an account or deployment id) or query
    (a token); `<custom>` for what is no http(s) URL."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower()
    except ValueError:  # a bracketed host that is no IPv6 address, a port that is no number
        return "<custom>"
    if parts.scheme.lower() not in ("http", "https") or not host:
        return "<custom>"
    return f"{parts.scheme.lower()}://{host if host in PUBLIC_API_HOSTS else '<host>'}"
