"""Imported by the pool's fork server before anything else (pool.PRELOAD): the server erases the API keys from its
own memory (keyless.py), so every worker it forks starts without them. Never import it in a process that needs a key."""
from .keyless import erase_secrets

ERASED = erase_secrets()
