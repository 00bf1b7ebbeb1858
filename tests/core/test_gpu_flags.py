"""GPUs that need a reset or reboot stay flagged until they get one; clearing is audited."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from watchdog.collectors.gpu_flags import GpuFlagStore, Recovery, wanted_recovery
from watchdog.infra.state import StateDB
from watchdog.model import Sample, metric


def _lost(gpu: str, value: float = 1.0) -> Sample:
    return Sample(metric("watchdog_gpu_lost", gpu=gpu, uuid=f"GPU-{gpu}"), value)


def _action(gpu: str, action: str) -> Sample:
    return Sample(metric("watchdog_gpu_recovery_action", gpu=gpu, uuid=f"GPU-{gpu}", action=action), 1.0)


def test_wanted_recovery_takes_the_strongest() -> None:
    wanted = wanted_recovery([_lost("0"), _lost("1", 0.0), _action("2", "gpu_reset"), _action("2", "node_reboot"),
                              _action("3", "none"), _action("4", "drain_and_reset")])
    assert {uuid: w.recovery for uuid, w in wanted.items()} == {
        "GPU-0": Recovery.RESET, "GPU-2": Recovery.REBOOT, "GPU-4": Recovery.RESET}


def test_a_flag_outlives_its_cause_and_a_restart(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.db")
    store = GpuFlagStore(db, boot_id="boot-1")
    assert [f.uuid for f in store.observe([_lost("5")], 1000)] == ["GPU-5"]
    assert store.observe([_lost("5")], 2000) == []  # already flagged: no second audit row
    assert store.observe([_lost("5", 0.0)], 3000) == []  # NVML forgot it; the flag stays
    db.close()
    store = GpuFlagStore(StateDB(tmp_path / "state.db"), boot_id="boot-1")  # the agent restarted
    assert store.clear_rebooted(4000) == []
    samples = store.samples()
    assert [(dict(s.labels)["gpu"], dict(s.labels)["action"], s.value) for s in samples] == [("5", "reset", 1.0)]


def test_a_reboot_request_upgrades_a_reset_flag(tmp_path: Path) -> None:
    store = GpuFlagStore(StateDB(":memory:"), boot_id="boot-1")
    store.observe([_lost("1")], 1000)
    store.observe([_action("1", "node_reboot")], 2000)
    store.observe([_lost("1")], 3000)  # a reset request does not downgrade it
    assert [(f.gpu, f.recovery) for f in store.flags()] == [("1", Recovery.REBOOT)]
    assert [r["event"] for r in store.audit()] == ["flagged", "flagged"]


def test_a_reboot_clears_flags_of_the_earlier_boot(tmp_path: Path) -> None:
    GpuFlagStore(StateDB(tmp_path / "state.db"), boot_id="boot-1").observe([_lost("2")], 1000)
    store = GpuFlagStore(StateDB(tmp_path / "state.db"), boot_id="boot-2")
    assert [f.gpu for f in store.clear_rebooted(5000)] == ["2"]
    assert store.flags() == []
    assert store.audit()[-1] == {"ts_ms": 5000, "uuid": "GPU-2", "gpu": "2", "event": "cleared",
                                 "action": "reset", "actor": "agent", "reason": "the node rebooted"}


def test_the_audit_trail_is_append_only() -> None:
    db = StateDB(":memory:")
    GpuFlagStore(db, boot_id="b").observe([_lost("0")], 1)
    with pytest.raises(Exception, match="append-only"):
        db.execute("DELETE FROM gpu_flag_audit")


def test_cli_lists_and_clears_with_an_audited_operator(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state")}))
    store = GpuFlagStore(StateDB.in_dir(tmp_path / "state"), boot_id="b")
    store.observe([_lost("3"), _lost("4")], 1000)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "watchdog", "gpu", *args, "--config", str(config)],
                              capture_output=True, text=True, timeout=60, check=False,
                              env={**os.environ, "SUDO_USER": "alice"})

    listed = json.loads(cli("list", "--json").stdout)
    assert [(f["gpu"], f["recovery"]) for f in listed] == [("3", "reset"), ("4", "reset")]
    missing = cli("clear", "GPU-5")
    assert missing.returncode == 1
    assert "is not flagged (did you mean GPU-3?)" in missing.stderr or "(did you mean GPU-4?)" in missing.stderr
    done = cli("clear", "3", "--reason", "nvidia-smi -r done")
    assert done.returncode == 0, done.stderr
    assert "cleared GPU 3 (GPU-3)" in done.stdout
    assert [f.gpu for f in store.flags()] == ["4"]
    last = store.audit()[-1]
    assert (last["event"], last["actor"], last["reason"]) == ("cleared", "alice (cli)", "nvidia-smi -r done")
