"""Where a request comes from: the peer address, or what a trusted reverse proxy says.

``X-Forwarded-For`` is written by whoever sends the request, so it counts only when the
peer is a proxy the platform named (``--trusted-proxy CIDR``, ``TAU_TRUSTED_PROXIES``).
Each proxy appends the address it received the request from, so the client is the
right-most address that is not itself a trusted proxy: everything to the left of it was
written by the client and proves nothing. The address feeds the failed-login limiter and
the audit log.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from fastapi import Request

from taugrid.errors import UsageError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
UNKNOWN = "unknown"


def parse_trusted_proxies(values: Iterable[str]) -> tuple[Network, ...]:
    """Networks from ``--trusted-proxy`` values (``10.0.0.0/8``, ``192.0.2.7``, ``::1``);
    a value may hold several separated by commas or spaces (the environment variable)."""
    nets: list[Network] = []
    for value in values:
        for item in value.replace(",", " ").split():
            try:
                nets.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise UsageError(
                    f"--trusted-proxy: {item!r} is not an address or network such as "
                    "10.0.0.0/8 or 192.0.2.7"
                ) from None
    return tuple(nets)


def _address(text: str) -> Address | None:
    """An address as proxies write it: bare, ``[v6]``, ``[v6]:port`` or ``v4:port``."""
    text = text.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.partition(":")[0]  # v4:port
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _trusted(addr: Address, trusted: Sequence[Network]) -> bool:
    return any(addr.version == net.version and addr in net for net in trusted)


def client_address(
    peer: str | None, forwarded_for: Sequence[str], trusted: Sequence[Network]
) -> str:
    """The client's address. Pure: ``peer`` is the TCP peer, ``forwarded_for`` every
    ``X-Forwarded-For`` header in order, ``trusted`` the trusted proxy networks.

    Walking from the right, each trusted hop vouches for the address to its left; the
    first address not trusted is the client. An entry that is not an address ends the
    walk at the hop that wrote it (its own address is the best that is known); when every
    hop is trusted the left-most one is the client.
    """
    if not peer:
        return UNKNOWN
    peer_addr = _address(peer)
    if peer_addr is None or not trusted or not _trusted(peer_addr, trusted):
        return str(peer_addr) if peer_addr is not None else peer
    hops = [h for header in forwarded_for for h in header.split(",") if h.strip()]
    current = peer_addr
    for hop in reversed(hops):
        addr = _address(hop)
        if addr is None:
            break
        current = addr
        if not _trusted(addr, trusted):
            break
    return str(current)


def request_source(request: Request) -> str:
    """The calling client's address as this server sees it (set once per request by the
    token check; computed here for routes without one, such as the OIDC login)."""
    known = getattr(request.state, "source", None)
    if isinstance(known, str):
        return known
    trusted: Sequence[Network] = getattr(request.app.state, "trusted_proxies", ())
    peer = request.client.host if request.client else None
    forwarded = request.headers.getlist("x-forwarded-for") if trusted else []
    source = client_address(peer, forwarded, trusted)
    request.state.source = source
    return source
