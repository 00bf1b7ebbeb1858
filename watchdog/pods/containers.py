"""Container id to namespace, pod and container names, from the kubelet's ``/var/log/containers``.

The kubelet links every container's log there as ``<pod>_<namespace>_<container>-<container id>.log``.
Pod and namespace names are DNS names and container names DNS labels, none of which may hold ``_``,
and the id is 64 hex digits, so the name splits without ambiguity. This is how the agent names the pod
of an engine process found through its cgroup (:mod:`watchdog.pods.cgroup`): PodResources
answers carry no container ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from watchdog.pods.podresources import PodRef

_LOG_NAME = re.compile(r"^([^_/]+)_([^_/]+)_([^_/]+)-([0-9a-f]{64})\.log$")


def parse_container_log_name(name: str) -> tuple[str, PodRef] | None:
    """``(container id, PodRef)`` of one ``/var/log/containers`` file name, or None if it is not one."""
    match = _LOG_NAME.match(name)
    if match is None:
        return None
    pod, namespace, container, container_id = match.groups()
    return container_id, PodRef(namespace, pod, container)


def container_index(names: Iterable[str]) -> dict[str, PodRef]:
    """Container id -> its pod, from the file names of ``/var/log/containers`` (others ignored)."""
    index: dict[str, PodRef] = {}
    for name in names:
        parsed = parse_container_log_name(name)
        if parsed is not None:
            index[parsed[0]] = parsed[1]
    return index


def read_container_index(directory: str | Path) -> dict[str, PodRef]:
    """:func:`container_index` of a directory's entries; empty when it cannot be listed."""
    try:
        return container_index(entry.name for entry in Path(directory).iterdir())
    except OSError:
        return {}
