"""Shared test types (imported by conftest and tests)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Tenant:
    name: str
    admin: str
    submit: str
    read: str

    def h(self, role: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {getattr(self, role)}"}
