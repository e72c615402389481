"""Model adapters behind one protocol (base.Model): litellm, the built-in reference and tuner, replay.

`load_model(name, ...)` (registry.py) turns a model string into a Model, importing only what it needs.
"""
from .base import Model, ModelError, ModelExhausted, ModelReply, ModelRequest, ModelUnavailable, TurnOutcome
from .registry import load_model, model_names

__all__ = ["Model", "ModelError", "ModelExhausted", "ModelReply", "ModelRequest", "ModelUnavailable", "TurnOutcome", "load_model", "model_names"]
