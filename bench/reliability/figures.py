"""How the report writes figures: numbers, spans, counts, verdicts, and each scenario's title."""

from __future__ import annotations

from typing import Any

TITLES = {
    "profile-kill": "1. A profile worker killed mid-job",
    "analysis-kill": "2. The analysis worker killed mid-analysis",
    "redis": "3. Redis killed, Redis down",
    "postgres": "4. Postgres stopped and started under submissions",
    "schemathesis": "5. Schemathesis: the public API and the worker routes",
    "bad-inputs": "6. Hand-made hostile inputs",
    "isolation": "7. Isolation: other tenants, other roles, worker and job tokens",
    "hostile-jobs": "8. Hostile jobs: the jail's tests",
}


def num(x: Any, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def span(xs: list[Any], digits: int = 1) -> str:
    ys = [x for x in xs if x is not None]
    if not ys:
        return "–"
    return f"{num(min(ys), digits)}–{num(max(ys), digits)}" if len(ys) > 1 else num(ys[0], digits)


def tally(found: dict[str, int], between: str = " ") -> str:
    return ", ".join(f"{v}{between}{k}" for k, v in found.items()) or "–"


def verdict(ok: bool | None) -> str:
    return "–" if ok is None else ("holds" if ok else "**found**")
