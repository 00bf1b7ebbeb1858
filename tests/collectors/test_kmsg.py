"""Kernel-log readers (file like tail -F, /dev/kmsg records, journald) and the kmsg collector end to end."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.support.settings import settings_of
from watchdog.collectors.base import CollectorContext, NoData
from watchdog.collectors.kmsg import (
    FALLEN_OFF_BUS,
    OOM_KILLS,
    SXID_ERRORS,
    XID_ERRORS,
    KmsgCollector,
    kmsg_collectors,
    recent_events,
)
from watchdog.fakes.pynvml import FakeNvml
from watchdog.infra.state import StateDB
from watchdog.kmsg.follow import FileFollower, JournalReader, KmsgReader, read_boot_id
from watchdog.model import label_value, metric_name

XID79 = "NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


# ---- FileFollower ------------------------------------------------------------------------------------

def test_follower_reads_only_new_complete_lines(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("one\ntwo\n")
    follower = FileFollower(log)
    assert follower.read() == ["one", "two"]
    assert follower.read() == []
    append(log, "three\nfou")
    assert follower.read() == ["three"]  # the partial line waits for its newline
    append(log, "r\n")
    assert follower.read() == ["four"]


def test_follower_waits_for_a_missing_file(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    follower = FileFollower(log)
    assert follower.read() == []
    log.write_text("hello\n")
    assert follower.read() == ["hello"]


def test_follower_survives_rotation(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("a\n")
    follower = FileFollower(log)
    assert follower.read() == ["a"]
    append(log, "b\nc-without-newline")
    log.rename(tmp_path / "kern.log.1")  # logrotate: rename, then a new file
    log.write_text("d\n")
    assert follower.read() == ["b", "c-without-newline", "d"]
    append(log, "e\n")
    assert follower.read() == ["e"]


def test_follower_survives_truncation(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("aaaaaaaaaa\nbbbbbbbbbb\n")
    follower = FileFollower(log)
    assert follower.read() == ["aaaaaaaaaa", "bbbbbbbbbb"]
    with open(log, "w", encoding="utf-8") as handle:  # copytruncate
        handle.write("x\n")
    assert follower.read() == ["x"]


def test_follower_restart_neither_rereads_nor_misses(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("one\ntwo\npart")
    first = FileFollower(log)
    assert first.read() == ["one", "two"]
    cursor = first.cursor()
    first.close()
    append(log, "ial\nthree\n")  # logged while the agent was down
    second = FileFollower(log, cursor)
    assert second.read() == ["partial", "three"]
    assert second.read() == []


def test_follower_restart_after_rotation_while_down(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("one\n")
    first = FileFollower(log)
    assert first.read() == ["one"]
    cursor = first.cursor()
    first.close()
    append(log, "two\n")
    log.rename(tmp_path / "kern.log.1")
    log.write_text("three\n")
    second = FileFollower(log, cursor)
    assert second.read() == ["two", "three"]


def test_follower_bounds_work_per_call(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("".join(f"line {i:04d}\n" for i in range(1000)))
    follower = FileFollower(log, max_bytes=1000)
    seen: list[str] = []
    for _ in range(20):
        seen.extend(follower.read())
    assert seen == [f"line {i:04d}" for i in range(1000)]


# ---- KmsgReader ----------------------------------------------------------------------------------------

KMSG = """6,3964,206764307,-;nvidia-nvswitch2: open (major=510)
4,3995,257001120,-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
 SUBSYSTEM=pci
 DEVICE=+pci:0000:18:00.0
4,3997,257002000,-;NVRM: Xid (PCI:0000:2a:00): 13, pid=4242, name=python3, Graphics SM Warp Exception
"""


def test_kmsg_reader_skips_what_it_saw_in_this_boot(tmp_path: Path) -> None:
    device = tmp_path / "kmsg"
    device.write_text(KMSG)
    reader = KmsgReader("boot-a", path=device)
    lines = reader.read()
    assert [line.split(",")[1] for line in lines] == ["3964", "3995", "3997"]  # dictionary lines dropped
    assert reader.cursor() == {"kind": "kmsg", "boot_id": "boot-a", "seq": 3997}
    reader.close()
    append(device, "3,3998,257003000,-;Out of memory: Killed process 25315 (python3)\n")
    again = KmsgReader("boot-a", reader.cursor(), path=device)  # the device is re-read from its start
    assert [line.split(",")[1] for line in again.read()] == ["3998"]
    other_boot = KmsgReader("boot-b", reader.cursor(), path=device)  # a new boot: sequence numbers restarted
    assert len(other_boot.read()) == 4


def test_kmsg_reader_missing_device_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        KmsgReader("b", path=tmp_path / "none").read()


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg not readable here")
def test_real_dev_kmsg() -> None:
    boot = read_boot_id()
    reader = KmsgReader(boot)
    try:
        lines = reader.read()
    except PermissionError:
        pytest.skip("/dev/kmsg not readable (container)")
    finally:
        reader.close()
    seqs = [int(line.split(",")[1]) for line in lines]
    assert seqs == sorted(seqs)
    again = KmsgReader(boot, reader.cursor())
    try:
        newer = again.read()
    finally:
        again.close()
    assert all(int(line.split(",")[1]) > reader.cursor()["seq"] for line in newer)


# ---- JournalReader ---------------------------------------------------------------------------------------

def test_journal_reader_uses_a_cursor_file(tmp_path: Path) -> None:
    stub = tmp_path / "journalctl"
    calls = tmp_path / "calls"
    stub.write_text(f"""#!/bin/sh
echo "$@" >> {calls}
for arg in "$@"; do case "$arg" in --cursor-file=*) f="${{arg#--cursor-file=}}";; esac; done
if [ -f "$f" ]; then echo "-- No entries --"; exit 0; fi
echo "Nov 04 10:00:00.123456 host kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
echo "s=cursor-1" > "$f"
""")
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    reader = JournalReader(tmp_path / "state" / "cursor", command=[str(stub)])
    line = "Nov 04 10:00:00.123456 host kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    assert reader.read() == [line]
    assert reader.read() == []
    first, second = calls.read_text().splitlines()
    assert "-k" in first and "short-precise" in first and "--boot" in first
    assert "--boot" not in second and f"--cursor-file={tmp_path / 'state' / 'cursor'}" in second


def test_journal_reader_failure_is_an_error(tmp_path: Path) -> None:
    stub = tmp_path / "journalctl"
    stub.write_text("#!/bin/sh\necho broken >&2\nexit 1\n")
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(OSError, match="broken"):
        JournalReader(tmp_path / "c", command=[str(stub)]).read()


# ---- the collector -------------------------------------------------------------------------------------

def values(samples: list[Any], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(p for p in s.labels if p[0] != "__name__"): s.value for s in samples if metric_name(s.labels) == name}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, log: Path, *, boot: str = "boot-1", nvml: Any = None, clock: Any = None) -> KmsgCollector:
    db = StateDB(tmp_path / "state.db")
    return KmsgCollector(lambda cursor: FileFollower(log, cursor), db, source_key=f"file:{log}",
                         nvml=nvml, boot_id=boot, clock=clock or Clock())


@pytest.fixture
def nvml() -> FakeNvml:
    return FakeNvml.from_profile("h100-sxm-8")


def test_counts_xids_per_gpu_with_nvml_identity(tmp_path: Path, nvml: FakeNvml) -> None:
    log = tmp_path / "kmsg.log"
    uuid = None
    nvml.nvmlInit()
    uuid = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(2))
    log.write_text("\n".join([
        "[1.0] " + XID79.format(bus="3a"),                       # GPU 2 of the h100 profile
        "[1.1] NVRM: GPU 0000:3a:00.0: GPU has fallen off the bus.",  # same incident
        "[2.0] NVRM: Xid (PCI:0000:18:00): 13, pid=10, name=python3, Graphics SM Warp Exception",
        "[2.1] NVRM: Xid (PCI:0000:18:00): 13, pid=10, name=python3, Graphics Exception: ESR 0x1",
        "[3.0] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
        "[4.0] Out of memory: Killed process 4321 (vllm) total-vm:1kB",
        "",
    ]))
    collector = make(tmp_path, log, nvml=nvml)
    samples = collector.collect()
    xids = values(samples, XID_ERRORS)
    assert xids == {
        (("gpu", "2"), ("uuid", uuid), ("xid", "79")): 1.0,
        (("gpu", "0"), ("uuid", nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(0))), ("xid", "13")): 2.0,
    }
    assert values(samples, FALLEN_OFF_BUS) == {}  # the Xid 79 line came first: counted as xid, once
    assert values(samples, SXID_ERRORS) == {(("pci_bus_id", "0000:05:00"), ("sxid", "20034")): 1.0}
    assert values(samples, OOM_KILLS) == {(("process", "vllm"),): 1.0}
    assert collector.collect() == samples  # nothing new: same counters


def test_fallen_off_bus_counts_as_xid_79_and_its_own_series(tmp_path: Path, nvml: FakeNvml) -> None:
    log = tmp_path / "kmsg.log"
    log.write_text("[ 1843.3] NVRM: The NVIDIA GPU 0000:18:00.0\n"
                   "          NVRM: (PCI ID: 10de:2330) installed in this system has\n"
                   "          NVRM: fallen off the bus and is not responding to commands.\n")
    samples = make(tmp_path, log, nvml=nvml).collect()
    assert [label_value(s.labels, "xid") for s in samples if metric_name(s.labels) == XID_ERRORS] == ["79"]
    assert [s.value for s in samples if metric_name(s.labels) == FALLEN_OFF_BUS] == [1.0]


def test_restart_keeps_counters_and_does_not_reread(tmp_path: Path, nvml: FakeNvml) -> None:
    log = tmp_path / "kmsg.log"
    log.write_text(XID79.format(bus="18") + "\n")
    first = make(tmp_path, log, nvml=nvml)
    first.collect()
    first.close()
    append(log, "NVRM: Xid (PCI:0000:18:00): 48, An uncorrectable double bit error (DBE) has been detected\n")
    second = make(tmp_path, log, nvml=nvml)
    samples = second.collect()
    xids = {label_value(s.labels, "xid"): s.value for s in samples if metric_name(s.labels) == XID_ERRORS}
    assert xids == {"79": 1.0, "48": 1.0}
    assert [e["xid"] for e in recent_events(second.db, 0)] == [79, 48]


def test_lost_gpu_keeps_its_identity_from_the_state_db(tmp_path: Path, nvml: FakeNvml) -> None:
    log = tmp_path / "kmsg.log"
    log.write_text("NVRM: Xid (PCI:0000:5d:00): 13, pid=1, name=a, b\n")
    first = make(tmp_path, log, nvml=nvml)
    first.collect()  # learns the PCI → GPU map while every GPU still answers
    first.close()
    nvml.set(3, lost=True)
    append(log, XID79.format(bus="5d") + "\n")
    second = make(tmp_path, log, nvml=nvml)
    second.collect()
    [event] = recent_events(second.db, 0, kinds=["xid"])[-1:]
    assert (event["xid"], event["gpu"]) == (79, "3") and event["uuid"].startswith("GPU-")


def test_without_nvml_the_uuid_comes_from_the_log(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    log.write_text("NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d\n"
                   "NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=x, Timeout after 6s\n")
    samples = make(tmp_path, log).collect()
    assert values(samples, XID_ERRORS) == {
        (("gpu", "unknown"), ("uuid", "GPU-509665ad-b600-ac93-3616-d754b23d636d"), ("xid", "119")): 1.0}


def test_escalation_across_reboots(tmp_path: Path, nvml: FakeNvml) -> None:
    log = tmp_path / "kmsg.log"
    log.write_text("")
    actions = []
    for boot in ("boot-1", "boot-2", "boot-3"):
        append(log, XID79.format(bus="2a") + "\n")
        collector = make(tmp_path, log, boot=boot, nvml=nvml)
        collector.collect()
        collector.close()
        actions.append(recent_events(collector.db, 0)[-1]["action"])
    assert actions == ["reboot_system", "reboot_system", "hardware_inspection"]


def test_recent_events_since(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    clock = Clock()
    log.write_text("Out of memory: Killed process 1 (a)\n")
    collector = make(tmp_path, log, clock=clock)
    collector.collect()
    clock.now += 60
    append(log, "Out of memory: Killed process 2 (b)\n")
    collector.collect()
    newest = recent_events(collector.db, int(clock.now * 1000))
    assert [(e["kind"], e["pid"], e["process"]) for e in newest] == [("oom_kill", 2, "b")]
    assert len(recent_events(collector.db, 0)) == 2
    assert recent_events(collector.db, 0, kinds=["xid"]) == []


def test_unreadable_kmsg_is_no_data(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.db")
    collector = KmsgCollector(lambda cursor: KmsgReader("b", cursor, path=tmp_path / "missing"), db,
                              source_key="kmsg", boot_id="b")
    with pytest.raises(NoData):
        collector.collect()


def test_factory_reads_the_config(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(XID79.format(bus="18") + "\n")
    config = settings_of(f"state_dir: {tmp_path}\nkmsg:\n  source: {log}\n")
    db = StateDB(tmp_path / "state.db")
    [collector] = kmsg_collectors(config, CollectorContext(state_db=db, boot_id="b"))
    assert collector.name == "kmsg" and collector.timeout_seconds == 5
    assert any(metric_name(s.labels) == XID_ERRORS for s in collector.collect())
    disabled = settings_of("kmsg:\n  enabled: false\n")
    assert kmsg_collectors(disabled, CollectorContext()) == []


def test_gpu_lost_with_its_xid_keeps_gpu_and_uuid(tmp_path: Path, nvml: FakeNvml) -> None:
    """The demo's fallen-off-bus scenario: the Xid line and NVML's GPU_IS_LOST arrive together."""
    log = tmp_path / "kmsg.log"
    log.touch()
    nvml.nvmlInit()
    uuid5 = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(5))
    nvml.schedule([{"at_seconds": 10, "gpu": 5, "fault": "xid", "params": {"xid": 79}},
                   {"at_seconds": 10, "gpu": 5, "fault": "gpu_lost"}])
    collector = make(tmp_path, log, nvml=nvml)
    assert values(collector.collect(), XID_ERRORS) == {}  # before the fault: nothing, but the map is learnt
    nvml.advance(11)
    append(log, "".join(f"[ 11.0] {line}\n" for line in nvml.drain_kmsg()))
    with pytest.raises(nvml.NVMLError):
        nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(5))
    assert values(collector.collect(), XID_ERRORS) == {(("gpu", "5"), ("uuid", uuid5), ("xid", "79")): 1.0}


def test_idle_collections_do_not_write(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    clock = Clock()
    log.write_text("Out of memory: Killed process 1 (a)\n")
    collector = make(tmp_path, log, clock=clock)
    collector.collect()
    written = collector.db.query("SELECT t_ms FROM kmsg_cursor")[0]["t_ms"]
    clock.now += 5
    collector.collect()
    assert collector.db.query("SELECT t_ms FROM kmsg_cursor")[0]["t_ms"] == written
    append(log, "hello\n")  # a line without events still moves the cursor
    clock.now += 5
    collector.collect()
    assert collector.db.query("SELECT t_ms FROM kmsg_cursor")[0]["t_ms"] == written + 10_000


def test_every_series_is_in_the_exporter_catalogue(tmp_path: Path, nvml: FakeNvml) -> None:
    from watchdog.exporter.catalogue import load_catalogue

    catalogue = load_catalogue()
    log = tmp_path / "kmsg.log"
    log.write_text("NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.\n"
                   "NVRM: Xid (PCI:0000:2a:00): 13, pid=1, name=a, b\n"
                   "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up\n"
                   "Out of memory: Killed process 4321 (vllm) total-vm:1kB\n")
    names = set()
    for sample in make(tmp_path, log, nvml=nvml).collect():
        name = metric_name(sample.labels)
        names.add(name)
        spec = catalogue[name]
        assert {k for k, _ in sample.labels} - {"__name__"} == set(spec.labels), name
        assert spec.type == ("counter" if name.endswith("_total") else "gauge")
        assert spec.help
    assert len(names) == 6


def test_an_unreadable_kernel_log_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import watchdog.collectors.kmsg as kmsg_module
    from watchdog.collectors.kmsg import kmsg_access_problem

    device = tmp_path / "kmsg"
    device.write_text("")
    device.chmod(0)
    if os.geteuid() == 0:  # root reads a mode-000 file: refuse the open as the kernel refuses a user
        real_open = os.open

        def refusing_open(path: str, flags: int, *args: Any) -> int:
            if path == str(device):
                raise PermissionError(13, "Permission denied", path)
            return real_open(path, flags, *args)

        monkeypatch.setattr(kmsg_module.os, "open", refusing_open)
    problem = kmsg_access_problem(str(device))
    assert f"{device} is not readable by uid {os.getuid()}" in problem
    assert "CAP_SYSLOG" in problem and "systemd-journal group" in problem
    assert "does not exist" in kmsg_access_problem(str(tmp_path / "absent"))
    monkeypatch.undo()
    device.chmod(0o600)
    assert kmsg_access_problem(str(device)) == ""
