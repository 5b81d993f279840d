"""Where the service may send a request that a project chose the address of (its alert webhook): public addresses
only, unless the operator allows a network (``ATTNPROF_ALERT_WEBHOOKS__ALLOW_NETWORKS``).

Refused: loopback, link-local (169.254.0.0/16, fe80::/10), private (RFC 1918, fc00::/7), shared (100.64.0.0/10),
unspecified, multicast, reserved and every other address that is not globally routable, checked on the IPv4
address inside an IPv4-mapped, 6to4 or NAT64 one. A host written as a number in any form the resolver takes
(``2130706433``, ``127.1``, ``0x7f.1``) is that address. The cloud metadata service (``169.254.169.254``,
``fd00:ec2::254``, ``metadata.google.internal``) is refused whatever the operator allows: what it serves is this
host's credentials, never a receiver of alerts.

A URL is checked when it is set (``url_refusal``: a literal address, or the addresses its name resolves to then)
and again at every connection (``client``): DNS may answer differently by then, so the name is resolved again,
every address it resolves to is checked, and the connection goes to a checked address, the name kept as the Host
header and the TLS server name. Redirects are not followed, and no environment proxy is used (a proxy would
resolve the name itself). ``resolve`` is the one place a name is resolved.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

import httpx

Address = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network

SCHEMES = ("http", "https")
ALLOW_SETTING = "ATTNPROF_ALERT_WEBHOOKS__ALLOW_NETWORKS"
METADATA_ADDRESSES = frozenset({ip_address("169.254.169.254"), ip_address("fd00:ec2::254")})
METADATA_NAMES = frozenset({"metadata.google.internal", "metadata.goog"})
_SHARED = ip_network("100.64.0.0/10")
_NAT64 = ip_network("64:ff9b::/96")
_RULE = f"requests go to public addresses only, or to a network the operator allows ({ALLOW_SETTING})"
_METADATA = "the cloud metadata service"
_NEVER = "never sent to, whatever the operator allows"


class RefusedDestination(httpx.TransportError):
    """A request not sent: its host is, or resolves to, an address this service does not send to. Raised before any
    connection is tried, so it says nothing of what listens there."""


def resolve(host: str, port: int) -> list[Address]:
    """Every address ``host`` resolves to (``socket.gaierror`` when it does not), in the resolver's order."""
    found: list[Address] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in found:
            found.append(address)
    return found


def literal(host: str) -> Address | None:
    """The address ``host`` writes, in any form the system's resolver reads as a number (dotted quad, IPv6, or the
    old ``inet_aton`` forms: ``2130706433``, ``127.1``, ``0x7f.1``, ``0177.0.0.1``); None for a name."""
    bare = host.strip("[]").replace("%25", "%").split("%", 1)[0]
    try:
        return ip_address(bare)
    except ValueError:
        pass
    try:
        return IPv4Address(socket.inet_aton(bare))
    except OSError:
        return None


def _embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _kind(address: Address) -> str | None:
    """What kind of address this service does not send to ``address`` is; None for a public one."""
    if address in METADATA_ADDRESSES:
        return _METADATA
    if isinstance(address, IPv6Address) and (inner := _embedded_ipv4(address)) is not None:
        return _kind(inner)
    for kind, test in (
        ("a loopback address", address.is_loopback),
        ("a link-local address", address.is_link_local),
        ("the unspecified address", address.is_unspecified),
        ("a multicast address", address.is_multicast),
        ("a shared (carrier-grade NAT) address", isinstance(address, IPv4Address) and address in _SHARED),
        ("a reserved address", address.is_reserved),
        ("a private address", address.is_private),
        ("an address that is not globally routable", not address.is_global),
    ):
        if test:
            return kind
    return None


def refusal(address: Address, allow: Sequence[Network]) -> str | None:
    """Why ``address`` is refused (``"a loopback address"``), or None: a public address, or one in a network of
    ``allow`` (the cloud metadata service is refused whatever ``allow`` says)."""
    kind = _kind(address)
    if kind is None or kind == _METADATA:
        return kind
    inner = _embedded_ipv4(address) if isinstance(address, IPv6Address) else None
    candidates = [a for a in (address, inner) if a is not None]
    if any(a in network for network in allow for a in candidates if a.version == network.version):
        return None
    return kind


def destinations(host: str, port: int, allow: Sequence[Network]) -> list[Address]:
    """The addresses to connect to for ``host``: the one it writes, or every one it resolves to now, all of them
    allowed. ``RefusedDestination`` otherwise, naming the rule (never the resolved address); ``socket.gaierror``
    for a name that does not resolve."""
    name = host.rstrip(".").lower()
    if name in METADATA_NAMES:
        raise RefusedDestination(f"{host} is {_METADATA}: {_NEVER}")
    written = literal(name)
    addresses = [written] if written is not None else resolve(name, port)
    for address in addresses:
        kind = refusal(address, allow)
        if kind is not None:
            where = f"{address} is" if written is not None else f"{host} resolves to"
            raise RefusedDestination(f"{where} {kind}: {_NEVER if kind == _METADATA else _RULE}")
    if not addresses:
        raise socket.gaierror(socket.EAI_NONAME, f"{host} resolves to no address")
    return addresses


def url_refusal(url: str, allow: Sequence[Network]) -> str | None:
    """Why ``url`` may not be sent to, checked when it is set: its scheme, then its host (a literal address, or the
    addresses its name resolves to now); None when it may. A name that does not resolve yet passes: it is checked
    again when something is sent."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        return f"not a URL ({exc})"
    if parsed.scheme not in SCHEMES or not parsed.host:
        return "must be an http:// or https:// URL with a host"
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        destinations(parsed.host, port, allow)
    except RefusedDestination as exc:
        return str(exc)
    except (OSError, UnicodeError):
        return None
    return None


class _PinnedTransport(httpx.HTTPTransport):
    """Connects to the addresses ``destinations`` checked, in turn, never to the name: what is checked is what is
    reached. No connection is kept for another request (one kept to an address would serve the next name pinned to
    it, under the first name's TLS identity)."""

    def __init__(self, allow: Sequence[Network]) -> None:
        super().__init__(trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))
        self._allow = tuple(allow)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in SCHEMES:
            raise RefusedDestination(f"{url.scheme}: only http and https are sent to", request=request)
        try:
            addresses = destinations(url.host, url.port or (443 if url.scheme == "https" else 80), self._allow)
        except RefusedDestination as exc:
            raise RefusedDestination(str(exc), request=request) from None
        except (OSError, UnicodeError) as exc:
            raise httpx.ConnectError(f"{url.host} does not resolve: {exc}", request=request) from None
        extensions = dict(request.extensions)
        if url.scheme == "https":
            extensions["sni_hostname"] = url.host
        failed: httpx.ConnectError | None = None
        for address in addresses:
            # The Host header was written from the name when the request was built: only where it goes changes.
            request.url, request.extensions = url.copy_with(host=str(address)), extensions
            try:
                return super().handle_request(request)
            except httpx.ConnectError as exc:
                failed = exc
            finally:
                request.url = url
        assert failed is not None
        raise failed


def client(*, timeout_s: float, allow: Sequence[Network]) -> httpx.Client:
    """An HTTP client for project-chosen URLs: each request's host checked and pinned as above, no redirect
    followed, no environment proxy."""
    return httpx.Client(transport=_PinnedTransport(allow), timeout=timeout_s, follow_redirects=False, trust_env=False)
