"""Go's ``net.SplitHostPort``, as Prometheus' ``stripPort`` and ``stripDomain`` use it."""

from __future__ import annotations


def split_host_port(host_port: str) -> tuple[str, str] | None:
    """``(host, port)`` as Go's ``net.SplitHostPort`` splits them (``[v6]:port`` too); None when it fails."""
    if host_port.startswith("["):
        close = host_port.find("]")
        if close < 0 or not host_port[close + 1:].startswith(":"):
            return None
        return host_port[1:close], host_port[close + 2:]
    if host_port.count(":") != 1:
        return None
    host, port = host_port.split(":")
    return host, port
