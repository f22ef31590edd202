"""Who is asking: the client's network address, for throttling sign-ins.

``X-Forwarded-For`` is whatever the sender wrote, so it is believed only when
the socket's peer is one of the configured ``trusted_proxies``, and then only
as far as the first hop that is not itself a trusted proxy: each trusted
proxy appends the address it saw, so reading from the right, the first
untrusted entry was written by a proxy of ours, and everything to its left
may be forged. The API runs with uvicorn's own proxy-header handling off
(``--no-proxy-headers``), which would otherwise rewrite the peer from the
header for local clients.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from starlette.requests import Request

from backend.core.settings import get_settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def _is_trusted(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def client_address(request: Request) -> str:
    """The address sign-in failures are counted against."""
    peer = request.client.host if request.client else ""
    networks = _networks(tuple(get_settings().trusted_proxies))
    if not peer or not _is_trusted(peer, networks):
        return peer or "unknown"
    hops = [hop.strip() for header in request.headers.getlist("x-forwarded-for")
            for hop in header.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _is_trusted(hop, networks):
            return hop
    # Every hop is one of our proxies: the request started at the first.
    return hops[0] if hops else peer
