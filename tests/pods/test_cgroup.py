"""/proc/PID/cgroup text to pod UID and container id: cgroup v1 and v2, systemd and cgroupfs drivers."""

from __future__ import annotations

import pytest

from watchdog.pods.cgroup import PodCgroup, parse_cgroup, parse_cgroup_path

UID = "0d1b7e3c-5a2f-4c1e-9b8a-3f2e1d0c9b8a"
UID_ = UID.replace("-", "_")
CID = "4f3c2b1a" * 8

SLICE = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope"
V1_SYSTEMD = f"""12:pids:{SLICE}
11:memory:{SLICE}
1:name=systemd:{SLICE}
0::/
"""

V1_CGROUPFS = f"""11:memory:/kubepods/besteffort/pod{UID}/{CID}
10:cpu,cpuacct:/kubepods/besteffort/pod{UID}/{CID}
"""


@pytest.mark.parametrize(("text", "expected"), [
    (V1_SYSTEMD, PodCgroup(UID, CID, "burstable")),
    (V1_CGROUPFS, PodCgroup(UID, CID, "besteffort")),
    # cgroup v2, systemd driver, containerd
    (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
     PodCgroup(UID, CID, "besteffort")),
    # cgroup v2, systemd driver, CRI-O; a guaranteed pod has no QoS slice
    (f"0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-{CID}.scope\n", PodCgroup(UID, CID, "guaranteed")),
    # cgroup v2, cgroupfs driver, guaranteed
    (f"0::/kubepods/pod{UID}/{CID}\n", PodCgroup(UID, CID, "guaranteed")),
    # docker (dockershim era), systemd driver
    (f"4:devices:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/docker-{CID}.scope\n",
     PodCgroup(UID, CID, "burstable")),
    # seen from inside the agent's own cgroup namespace (hostPID, private cgroupns)
    (f"0::/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n", PodCgroup(UID, CID, "besteffort")),
    # a static pod's UID is a hash without dashes
    (f"0::/kubepods.slice/kubepods-pod{'a' * 32}.slice/cri-containerd-{CID}.scope\n",
     PodCgroup("a" * 32, CID, "guaranteed")),
])
def test_parse_cgroup_finds_pod_and_container(text: str, expected: PodCgroup) -> None:
    assert parse_cgroup(text) == expected


@pytest.mark.parametrize("text", [
    "0::/system.slice/inference-watchdog.service\n",
    "0::/user.slice/user-1000.slice/session-3.scope\n",
    "0::/\n",
    "",
    "garbage without colons\n",
    "0::/kubepods.slice/kubepods-burstable.slice\n",  # the QoS slice itself: no pod
])
def test_processes_outside_pods_have_none(text: str) -> None:
    assert parse_cgroup(text) is None


def test_pod_level_path_has_no_container_and_a_container_line_wins() -> None:
    pod_only = f"0::/kubepods/burstable/pod{UID}\n"
    assert parse_cgroup(pod_only) == PodCgroup(UID, "", "burstable")
    both = f"3:cpu:/kubepods/burstable/pod{UID}\n2:memory:/kubepods/burstable/pod{UID}/{CID}\n"
    assert parse_cgroup(both) == PodCgroup(UID, CID, "burstable")


def test_conmon_scope_is_not_a_container() -> None:
    path = f"/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{CID}.scope"
    assert parse_cgroup_path(path) == PodCgroup(UID, "", "guaranteed")
