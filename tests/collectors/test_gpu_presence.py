"""GPU presence from PCI sysfs and the module state: no device vs driver not installed vs not loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sysfs import make_sysfs
from watchdog.collectors.gpu_presence import DriverState, presence_samples, probe_presence
from watchdog.model import METRIC_NAME


@pytest.mark.parametrize(("gpus", "loaded", "installed", "state"), [
    (0, False, False, DriverState.NO_DEVICE),
    (0, False, True, DriverState.NO_DEVICE),
    (8, False, True, DriverState.NOT_LOADED),
    (8, False, False, DriverState.NOT_INSTALLED),
    (8, True, True, DriverState.LOADED),
])
def test_driver_state(tmp_path: Path, gpus: int, loaded: bool, installed: bool, state: DriverState) -> None:
    sysfs, modules, release = make_sysfs(tmp_path, gpus=gpus, loaded=loaded, installed=installed, nvswitches=4)
    presence = probe_presence(sysfs, modules, release)
    assert presence.state is state
    assert len(presence.pci_bus_ids) == gpus  # NVSwitches and the Intel VGA function are not GPUs


def test_samples_default_expected_to_the_pci_count(tmp_path: Path) -> None:
    sysfs, modules, release = make_sysfs(tmp_path, gpus=4, loaded=True, installed=True)
    presence = probe_presence(sysfs, modules, release)
    values = {dict(s.labels)[METRIC_NAME]: s.value for s in presence_samples(presence, None)}
    assert values == {"watchdog_gpu_pci_devices": 4.0, "watchdog_gpu_driver_loaded": 1.0,
                      "watchdog_gpu_driver_installed": 1.0, "watchdog_gpu_expected": 4.0}
    values = {dict(s.labels)[METRIC_NAME]: s.value for s in presence_samples(presence, 8)}
    assert values["watchdog_gpu_expected"] == 8.0


def test_missing_sysfs_means_no_device(tmp_path: Path) -> None:
    presence = probe_presence(tmp_path / "nothing", tmp_path / "nothing", "x")
    assert presence.state is DriverState.NO_DEVICE
