"""What counts as a placeholder rather than a secret, for every process's settings (the server's and the GPU
worker's): a token or key that is one of these words is refused at start."""

from __future__ import annotations

PLACEHOLDERS = frozenset({"changeme", "change-me", "secret", "placeholder", "xxx", "todo"})


def is_placeholder(value: str) -> bool:
    return value.strip().lower() in PLACEHOLDERS
