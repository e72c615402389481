"""Which API key a litellm model string needs, and whether it is there: checked before a run starts, so a
missing key costs one line and no retries (a provider answers a keyless call with errors that look transient).

    key_problem(model, api_base, api_key_env)   None, or one line saying what is missing and what to do
"""
from __future__ import annotations

import os

# The usual providers, answered without importing litellm (seconds); the rest ask litellm.
KNOWN_KEYS = {"openai": ("OPENAI_API_KEY",), "anthropic": ("ANTHROPIC_API_KEY",),
              "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"), "deepseek": ("DEEPSEEK_API_KEY",),
              "openrouter": ("OPENROUTER_API_KEY",), "mistral": ("MISTRAL_API_KEY",)}
# Servers one runs oneself: no key unless --api-key-env names one.
KEYLESS = ("hosted_vllm", "ollama", "ollama_chat", "lm_studio", "llamafile")
FIX = "export it, or use a model that needs no key (builtin/tuner, builtin/reference)"


def _litellm_missing(model: str, api_base: str | None) -> list[str]:
    from .litellm_model import _litellm

    missing = _litellm().validate_environment(model, api_base=api_base).get("missing_keys", [])
    return [k for k in missing if "KEY" in k or "TOKEN" in k]  # base URLs and versions have defaults or fail clearly


def key_problem(model: str, api_base: str | None = None, api_key_env: str | None = None, fix: str = FIX) -> str | None:
    """Why a call to `model` cannot be authorised here, or None when it can (as far as can be told); `fix`: what to do,
    after the missing variable's name."""
    if api_key_env:
        if os.environ.get(api_key_env):
            return None
        return (f"--api-key-env {api_key_env}: the variable {api_key_env} is not set (nothing else is sent in its "
                f"place); export it, or leave --api-key-env out")
    provider = model.split("/", 1)[0] if "/" in model else ""
    if provider in KEYLESS or (api_base and provider in ("openai", "")):
        return None  # a local OpenAI-compatible server: LiteLLMModel sends a placeholder key
    needed = KNOWN_KEYS.get(provider)
    if needed is not None:
        if any(os.environ.get(k) for k in needed):
            return None
        missing = list(needed)
    else:
        missing = _litellm_missing(model, api_base)
    if not missing:
        return None
    return f"{model} needs {' or '.join(missing)}, which is not set: {fix}"
