"""What counts as a placeholder rather than a secret, for every process's settings (the server's and the GPU
worker's): a token or key that is one of these words is refused at start."""

from __future__ import annotations

from pydantic import SecretStr

PLACEHOLDERS = frozenset({"changeme", "change-me", "secret", "placeholder", "xxx", "todo"})


def is_placeholder(value: str) -> bool:
    return value.strip().lower() in PLACEHOLDERS


def no_placeholder(value: SecretStr | None) -> SecretStr | None:
    """A settings validator's body: ``value`` unchanged, unless it is a placeholder (then the error says so)."""
    if value is not None and is_placeholder(value.get_secret_value()):
        raise ValueError("is a placeholder: set a real secret or leave it unset")
    return value
