"""A query parameter a route does not take is refused, not ignored.

FastAPI drops query parameters a route does not declare, so a misspelt filter (``regresion_only=false``) would answer
as if it were absent. Every API route refuses them instead: 422 ``invalid_payload``, naming each unknown parameter and
the ones the route takes.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from attnprof.server.errors import InvalidPayload


def _query_names(dependant: Dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _taken(route: APIRoute) -> frozenset[str]:
    """The query parameters ``route`` declares, its dependencies' included, by the name a client sends (kept on the
    route: routes are not hashable, and live as long as their app)."""
    taken: frozenset[str] | None = getattr(route, "_query_taken", None)
    if taken is None:
        taken = frozenset(_query_names(route.dependant))
        route._query_taken = taken  # type: ignore[attr-defined]
    return taken


def known_query_only(request: Request) -> None:
    """Refuse the request when its query string names a parameter its route does not declare."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    taken = _taken(route)
    unknown = sorted(set(request.query_params.keys()) - taken)
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        allowed = ", ".join(sorted(taken)) or "none"
        raise InvalidPayload(f"query: {names} is not a parameter of this route; it takes: {allowed}")
