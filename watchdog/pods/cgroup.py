"""The pod and container a process runs in, from its ``/proc/PID/cgroup`` text (pure).

The kubelet places every container in a cgroup under ``kubepods``; the path names the pod's UID and the
runtime's container id. Four layouts are recognised, each under cgroup v1 (one line per hierarchy,
``ID:controllers:path``) and v2 (one line ``0::path``):

- cgroupfs driver: ``/kubepods[/burstable|/besteffort]/pod<uid>/<container id>``
- systemd driver: ``/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid with _>.slice/``
  then ``<runtime>-<container id>.scope`` (runtime ``cri-containerd``, ``crio``, ``docker``)

A path seen from inside another cgroup namespace (``/../../kubepods-...``) is read the same way. The
container id is 64 hex digits; a runtime's helper scope (``crio-conmon-<id>.scope``) is not a container.
A process outside any pod gives None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UID = r"[0-9a-f]{8}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{12}"
_POD = re.compile(rf"(?:^|[/-])pod({_UID})(?:\.slice)?(?:/|$)")
_CONTAINER = re.compile(r"^(?:(cri-containerd|crio|docker|containerd)-)?([0-9a-f]{64})(?:\.scope)?$")
_QOS = re.compile(r"kubepods[/-](burstable|besteffort)")


@dataclass(frozen=True)
class PodCgroup:
    """Where a process runs: its pod's UID (dashed, as the API shows it), its container id (64 hex
    digits, "" when the path stops at the pod) and its QoS class (``guaranteed``, ``burstable``,
    ``besteffort``)."""

    pod_uid: str
    container_id: str
    qos: str


def _dashed(uid: str) -> str:
    plain = uid.replace("_", "").replace("-", "")
    if len(plain) != 32:
        return uid
    if "-" not in uid and "_" not in uid:
        return plain  # a static pod's UID is a hash without dashes: keep it as the kubelet writes it
    return f"{plain[:8]}-{plain[8:12]}-{plain[12:16]}-{plain[16:20]}-{plain[20:]}"


def parse_cgroup_path(path: str) -> PodCgroup | None:
    """The pod of one cgroup path, or None when the path is not under ``kubepods``."""
    if "kubepods" not in path:
        return None
    match = _POD.search(path)
    if match is None:
        return None
    last = path.rstrip("/").rsplit("/", 1)[-1]
    container = _CONTAINER.match(last)
    qos = _QOS.search(path)
    return PodCgroup(_dashed(match.group(1)), container.group(2) if container else "",
                     qos.group(1) if qos else "guaranteed")


def parse_cgroup(text: str) -> PodCgroup | None:
    """The pod of a process from the whole ``/proc/PID/cgroup`` text: the first line whose path names a
    pod, preferring one that also names the container (cgroup v1 lists a path per hierarchy)."""
    found: PodCgroup | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        pod = parse_cgroup_path(parts[2].strip())
        if pod is None:
            continue
        if pod.container_id:
            return pod
        found = found or pod
    return found
