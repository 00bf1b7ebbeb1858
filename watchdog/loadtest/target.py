"""Which endpoints a load test may hit: loopback only, unless the operator says otherwise.

A load test is deliberately an overload; pointed at a shared or production endpoint by mistake it is an
outage. So only ``localhost`` and literal loopback addresses (127.0.0.0/8, ::1) pass without
``--allow-remote``; other names are not resolved (a name that resolves to loopback today may not tomorrow).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback(url: str) -> bool:
    """True when ``url``'s host is ``localhost`` or a loopback IP literal."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_target(url: str, allow_remote: bool) -> None:
    """Raise ValueError for a non-loopback ``url`` unless ``allow_remote``."""
    if not allow_remote and not is_loopback(url):
        raise ValueError(f"refusing to load-test {url}: not a loopback address; pass --allow-remote if you mean it")
