"""The client address of the request being served, for the audit log.

It is the peer of the connection (``request.client.host``). ``X-Forwarded-For`` counts only when that peer is one
of the trusted proxies (``ATTNPROF_TRUSTED_PROXIES``): the header is read from its right end, each hop added by a
trusted proxy stepping back to the address that proxy saw, and the first address that is not a trusted proxy is
the client's. Without trusted proxies the header is ignored: anyone can send it.

A middleware puts the address in a context variable for the length of the request; code that records an event
reads it there (``request_address``), so the token check on every route gets it without a parameter threaded
through each dependency. Outside a request (the command line) it is None.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

from starlette.types import ASGIApp, Receive, Scope, Send

Network = IPv4Network | IPv6Network
# An IPv6 address with a zone is at most 45 + a zone name; longer (a test client's name) is cut.
ADDRESS_CHARS = 64
_ADDRESS: ContextVar[str | None] = ContextVar("attnprof_client_address", default=None)


def request_address() -> str | None:
    """The client address of the request being served; None outside one."""
    return _ADDRESS.get()


def networks(proxies: Iterable[str]) -> tuple[Network, ...]:
    """Addresses or networks (``10.0.0.1``, ``10.0.0.0/8``, ``::1``) as networks; ``ValueError`` naming a bad one."""
    return tuple(ip_network(p.strip(), strict=False) for p in proxies)


def _parse(hop: str) -> IPv4Address | IPv6Address | None:
    hop = hop.strip()
    if hop.startswith("["):  # [2001:db8::1]:443
        hop = hop[1:].partition("]")[0]
    elif hop.count(":") == 1:  # 192.0.2.1:443
        hop = hop.partition(":")[0]
    try:
        return ip_address(hop)
    except ValueError:
        return None


def client_address(scope: Scope, trusted: tuple[Network, ...]) -> str | None:
    """The client's address for this request (``scope`` of an HTTP request); None when the server knows none."""
    peer = scope.get("client")
    if not peer:
        return None
    host = str(peer[0])
    if not trusted:  # the server's own text of the peer's address (every request pays this path)
        return host[:ADDRESS_CHARS]
    current = _parse(host)
    if current is None:
        return host[:ADDRESS_CHARS]
    if any(current in net for net in trusted):
        hops = [
            hop
            for name, value in scope.get("headers", ())
            if name == b"x-forwarded-for"
            for hop in value.decode("latin-1").split(",")
            if hop.strip()
        ]
        while hops and any(current in net for net in trusted):
            forwarded = _parse(hops.pop())
            if forwarded is None:
                break  # not written by a proxy of ours: the last trusted hop is all that is known
            current = forwarded
    return str(current)


class ClientAddressMiddleware:
    """Sets the request's client address (``request_address``) for everything that serves the request."""

    def __init__(self, app: ASGIApp, *, trusted_proxies: Iterable[str] = ()) -> None:
        self.app = app
        self.trusted = networks(trusted_proxies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = _ADDRESS.set(client_address(scope, self.trusted))
        try:
            await self.app(scope, receive, send)
        finally:
            _ADDRESS.reset(token)
