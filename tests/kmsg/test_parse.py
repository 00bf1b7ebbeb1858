# ruff: noqa: E501  (real kernel-log lines are kept whole)
"""The kernel-log parser: real excerpts (tests/fixtures/kmsg), every prefix, every line form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from watchdog.kmsg.parse import (
    KernelEvent,
    KernelLogParser,
    parse_gpu_identity,
    parse_line,
    parse_text,
    split_kmsg_record,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kmsg"
LOGS = sorted(FIXTURES.glob("*.log"))
KEYS = ("kind", "xid", "pci_bus_id", "pid", "process", "severity", "action", "line")


def _fields(event: KernelEvent) -> dict[str, object]:
    return {key: getattr(event, key) for key in KEYS}


def test_fixtures_are_present() -> None:
    assert len(LOGS) >= 15
    for log in LOGS:
        assert log.with_suffix(".expected.json").exists(), log.name


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_fixture_events(log: Path) -> None:
    expected = json.loads(log.with_suffix(".expected.json").read_text())
    events = parse_text(log.read_text())
    assert [_fields(e) for e in events] == expected


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_fixture_messages_are_the_logged_text(log: Path) -> None:
    lines = log.read_text().splitlines()
    for event in parse_text(log.read_text()):
        source = split_kmsg_record(lines[event.line - 1])[1]
        if "\n" in source or (event.kind == "fallen_off_bus" and "fallen off" not in source):
            # a multi-line message is reported joined on one line
            assert event.message.startswith("NVRM: The NVIDIA GPU")
            assert event.message.endswith("not responding to commands.")
            continue
        assert event.message, event
        assert event.message in source, (event.message, source)
        assert source.rstrip().endswith(event.message)


# One message under every prefix a kernel log line can carry: the event must not depend on the prefix.
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
PREFIXES = [
    "",
    "6,1234,5678901,-;",
    "4,98765,123456789012,c;",
    "[ 1234.567890] ",
    "[6781741.548779] ",
    "[Mon Nov  4 10:00:00 2024] ",
    "Nov  4 10:00:00 gpu-node-7 kernel: ",
    "Nov 04 10:00:00.123456 gpu-node-7 kernel: ",
    "2024-11-04T10:00:00.123456+00:00 gpu-node-7 kernel: ",
    "Nov  4 10:00:00 gpu-node-7 kernel: [ 1234.567890] ",
    "kernel: ",
    "<4>[ 1234.567890] ",
    "[ 130.456250] [ T1946] ",
    "192.168.11.119: kern: warning: [2026-04-22T21:30:51.494604223Z]: ",
]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_any_prefix(prefix: str) -> None:
    event = parse_line(prefix + XID79, 7)
    assert event is not None
    assert (event.kind, event.xid, event.pci_bus_id, event.pid, event.process, event.line) == (
        "xid", 79, "0000:3b:00", 1234, "python3", 7)
    assert (event.severity, event.action) == ("fatal", "reboot_system")
    assert event.message == XID79


LINE_CASES = [
    # (line, kind, xid, pci, pid, process, severity, action)
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
     "xid", 79, "0000:3b:00", 1234, "python3", "fatal", "reboot_system"),
    ("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
     "xid", 79, "0000:01:00", None, None, "fatal", "reboot_system"),
    ("NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
     "xid", 79, "0000:05:00", None, None, "fatal", "reboot_system"),
    ("NVRM: Xid (0000:03:00): 14, Channel 00000001",
     "xid", 14, "0000:03:00", None, None, "info", "none"),
    ("NVRM: Xid (0001:00): 13, 0003 00000000 00008297 00000e08 00190000 00000040",
     "xid", 13, "0000:01:00", None, None, "warning", "restart_app"),
    ("NVRM: Xid (PCI:0000:D8:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 14",
     "xid", 74, "0000:d8:00", None, None, "critical", "reset_gpu"),
    ("NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH"
     " TIMEOUT, Info 0x58005", "xid", 109, "0000:cb:00", 1797828, "pt_main_thread", "critical", "reset_gpu"),
    ("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
     "xid", 63, "0000:10:1c", 1896, None, "warning", "none"),
    ("NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
     "xid", 95, "0000:01:00", 7062, None, "critical", "reset_gpu"),
    ("NVRM: Xid (PCI:0000:01:00): 38, pid=1659,",
     "xid", 38, "0000:01:00", 1659, None, "warning", "none"),
    ("NVRM: Xid (PCI:0000:05:00): 99999, unknown error",
     "xid", 99999, "0000:05:00", None, None, "warning", "contact_support"),
    # NVLink5: severity from the line, not the catalogue default
    ("NVRM: Xid (PCI:0000:04:00): 144, SAW_MVB Fatal XC0 i0 Link 00 (0x00000001 0x00000002 0x00000000 0x00000000)",
     "xid", 144, "0000:04:00", None, None, "critical", "reset_gpu"),
    ("NVRM: Xid (PCI:0000:04:00): 146, TLW_RX/TLW_RX_PIPE0 Nonfatal XC0 i0 Link 00 (0x0000000a 0x00000001 0x0 0x0)",
     "xid", 146, "0000:04:00", None, None, "warning", "none"),
    ("NVRM: Xid (PCI:0000:04:00): 150, MSE_WATCHDOG Fatal XC0 i0 Link 00 (0x00000000 0x00000000 0x0 0x0)",
     "xid", 150, "0000:04:00", None, None, "critical", "reset_gpu"),
    ("NVRM: Xid (PCI:0000:04:00): 149, pid=77, name=python3, NETIR_LINK_EVT Fatal XC1 i0 Link 07 (0x1 0x0)",
     "xid", 149, "0000:04:00", 77, "python3", "critical", "reset_gpu"),
    # Xid 154: the target recovery action decides
    ("NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
     "xid", 154, "0000:9b:00", None, None, "fatal", "reboot_system"),
    ("NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
     "xid", 154, "0000:9b:00", None, None, "info", "none"),
    ("NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed to GPU Reset Required",
     "xid", 154, "0000:9b:00", None, None, "critical", "reset_gpu"),
    ("NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)",
     "xid", 154, "0000:9b:00", None, None, "critical", "reset_gpu"),
    # fallen off the bus without an Xid
    ("NVRM: GPU 0000:3B:00.0: GPU has fallen off the bus.",
     "fallen_off_bus", 79, "0000:3b:00", None, None, "fatal", "reboot_system"),
    ("NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:2330) installed in this system has fallen off the bus and is"
     " not responding to commands.", "fallen_off_bus", 79, "0000:3b:00", None, None, "fatal", "reboot_system"),
    # NVSwitch
    ("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
     "sxid", 20034, "0000:05:00", None, None, "critical", "reboot_system"),
    ("nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
     "sxid", 12028, "0000:05:00", None, None, "warning", "none"),
    ("nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 11111, Data {0x50610002, 0x10100030}",
     "sxid", 11111, "0000:a9:00", None, None, "warning", "none"),
    # OOM killer
    ("Out of memory: Killed process 1234 (python3) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB",
     "oom_kill", None, None, 1234, "python3", "critical", "restart_app"),
    ("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=abc,mems_allowed=0-1,oom_memcg=/kubepods/pod1,"
     "task_memcg=/kubepods/pod1/abc,task=vllm,pid=4321,uid=1000", "oom_kill", None, None, 4321, "vllm", "critical",
     "restart_app"),
    ("Memory cgroup out of memory: Killed process 63214 (uwsgi) total-vm:3149468kB, anon-rss:164992kB",
     "oom_kill", None, None, 63214, "uwsgi", "critical", "restart_app"),
    ("Out of memory (oom_kill_allocating_task): Killed process 999 (pt_main_thread) total-vm:1kB",
     "oom_kill", None, None, 999, "pt_main_thread", "critical", "restart_app"),
]


@pytest.mark.parametrize("case", LINE_CASES, ids=lambda c: c[0][:60])
def test_line_forms(case: tuple[object, ...]) -> None:
    line, kind, xid, pci, pid, process, severity, action = case
    event = parse_line(str(line), 1)
    assert event is not None
    assert (event.kind, event.xid, event.pci_bus_id, event.pid, event.process, event.severity, event.action) == (
        kind, xid, pci, pid, process, severity, action)


NOT_EVENTS = [
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024",
    "NVRM: GPU Board Serial Number: 1650423013443",
    "NVRM: GPU at PCI:0000:00:05: GPU-efbdfde9-5798-a6e7-4c46-12518fa15375",
    "nvidia-nvswitch2: open (major=510)",
    "oom_reaper: reaped process 25315 (python3), now anon-rss:0kB, file-rss:74732kB, shmem-rss:12296kB",
    "Memory cgroup out of memory: Kill process 24572 (java) score 0 or sacrifice child",
    "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1b80)",
    "NVRM: GPU 0000:09:00.0: RmInitAdapter failed! (0x22:0x56:894)",
    "mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE",
    "",
]


@pytest.mark.parametrize("line", NOT_EVENTS)
def test_not_events(line: str) -> None:
    assert parse_line(line, 1) is None


def test_parse_line_is_pure() -> None:
    first = parse_line("[1.0] " + XID79, 3)
    assert first == parse_line("[1.0] " + XID79, 3)


def test_caused_by_previous_xid_is_recorded_not_counted() -> None:
    text = "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149"
    events = parse_text(text)
    assert len(events) == 1
    assert (events[0].xid, events[0].caused_by, events[0].action) == (45, 149, "none")


def test_nvlink5_details() -> None:
    event = parse_line("NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x0)", 1)
    assert event is not None
    assert event.detail("nvlink_unit") == "NETIR_LINK_EVT"
    assert event.detail("nvlink_severity") == "fatal"
    assert event.detail("link") == "1"
    minus_one = parse_line("NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x0)", 1)
    assert minus_one is not None and minus_one.detail("link") == "-1"


REDACTED = ["PCI:...", "PCI:0000:xx:00", "PCI:0000:XX:00", "PCI:xxxx:xx:xx", "<redacted>", "PCI:****:**:**", ""]


@pytest.mark.parametrize("dev", REDACTED)
def test_redacted_pci_is_null(dev: str) -> None:
    event = parse_line(f"NVRM: Xid ({dev}): 79, GPU has fallen off the bus.", 1)
    assert event is not None and event.xid == 79 and event.pci_bus_id is None


def test_kmsg_record_header_and_escapes() -> None:
    seq, text = split_kmsg_record("3,3996,257001500,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: has fallen off")
    assert seq == 3996
    assert text == "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: has fallen off"
    assert split_kmsg_record("[ 1.0] hello") == (None, "[ 1.0] hello")
    event = parse_line("4,3995,257001120,-;" + XID79, 1)
    assert event is not None and event.seq == 3995


# ---- what needs context: multi-line messages, identity lines, de-duplication -----------------------

def test_multiline_fallen_off_bus_reports_its_first_line() -> None:
    text = "\n".join([
        "[ 1.0] unrelated",
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
        "               NVRM: fallen off the bus and is not responding to commands.",
    ])
    [event] = parse_text(text)
    assert (event.kind, event.xid, event.pci_bus_id, event.line) == ("fallen_off_bus", 79, "0000:b3:00", 2)
    assert event.message == ("NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system "
                             "has fallen off the bus and is not responding to commands.")


def test_multiline_start_that_is_not_a_fall_expires() -> None:
    text = "\n".join([
        "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1b80)",
        "NVRM: installed in this system is not supported by the",
        "NVRM: NVIDIA 390.xx driver release.",
        "a", "b", "c", "d", "e",
        "NVRM: fallen off the bus and is not responding to commands.",
    ])
    [event] = parse_text(text)
    assert event.kind == "fallen_off_bus" and event.pci_bus_id is None and event.line == 9


def test_uuid_from_identity_lines() -> None:
    assert parse_gpu_identity("[1.0] NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d") == (
        "0000:9b:00", "GPU-509665ad-b600-ac93-3616-d754b23d636d")
    assert parse_gpu_identity("NVRM: GPU at PCI:0000:08:00: GPU-UID") is None
    assert parse_gpu_identity("NVRM: GPU at PCI:0000:xx:00: GPU-509665ad-b600-ac93-3616-d754b23d636d") is None
    events = parse_text((FIXTURES / "dmesg-T-akash-h100.log").read_text())
    assert [e.uuid for e in events] == [
        "GPU-efbdfde9-5798-a6e7-4c46-12518fa15375", "GPU-efbdfde9-5798-a6e7-4c46-12518fa15375",
        "GPU-3b6ec030-5adc-1847-e155-79f635584b4e", "GPU-c24840ec-8de1-83d5-b126-08000173ae32"]


def test_one_gpu_falling_off_is_one_incident() -> None:
    text = "\n".join([
        "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:92:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    ])
    assert [(e.kind, e.pci_bus_id) for e in parse_text(text)] == [("xid", "0000:91:00"), ("xid", "0000:92:00")]
    reversed_order = "NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.\nNVRM: Xid (PCI:0000:91:00): 79, x"
    assert [e.kind for e in parse_text(reversed_order)] == ["fallen_off_bus"]


def test_same_gpu_falling_again_much_later_counts_again() -> None:
    line = "NVRM: Xid (PCI:0000:91:00): 79, GPU has fallen off the bus."
    text = "\n".join([line, *(["filler"] * 40), line])
    assert [e.line for e in parse_text(text)] == [1, 42]


def test_oom_summary_and_kill_line_are_one_kill() -> None:
    text = "\n".join([
        "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
        "task_memcg=/user.slice,task=python3,pid=25315,uid=0",
        "Out of memory: Killed process 25315 (python3) total-vm:53312244kB, anon-rss:31451456kB",
        "oom_reaper: reaped process 25315 (python3), now anon-rss:0kB",
        "Out of memory: Killed process 25316 (python3) total-vm:1kB",
    ])
    assert [(e.pid, e.line) for e in parse_text(text)] == [(25315, 1), (25316, 4)]


def test_sxid_detail_lines_fold_into_their_primary() -> None:
    text = "\n".join([
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM Fault Up",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Severity 1 Engine instance 63 Sub-engine instance 00",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, 0x10000000}",
        "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Data {0x10000000, 0x10000000}",
    ])
    assert [(e.pci_bus_id, e.line) for e in parse_text(text)] == [("0000:05:00", 1), ("0000:06:00", 4)]


def test_parser_feed_keeps_line_numbers_of_the_caller() -> None:
    parser = KernelLogParser()
    assert parser.feed("hello", 100) == []
    [event] = parser.feed(XID79, 101)
    assert event.line == 101


def test_journal_json_and_coloured_dmesg() -> None:
    import json as jsonlib

    record = jsonlib.dumps({"__REALTIME_TIMESTAMP": "1730714400000000", "_TRANSPORT": "kernel",
                            "SYSLOG_IDENTIFIER": "kernel", "MESSAGE": XID79})
    event = parse_line(record, 1)
    assert event is not None and event.message == XID79 and event.pci_bus_id == "0000:3b:00"
    as_bytes = jsonlib.dumps({"MESSAGE": list(XID79.encode())})
    assert parse_text(as_bytes)[0].xid == 79
    coloured = "\x1b[32m[ 1234.567890] \x1b[0m\x1b[33mNVRM: \x1b[0mXid (PCI:0000:3b:00): 13, pid=5, name=python3, x"
    event = parse_line(coloured, 1)
    assert event is not None and (event.xid, event.pid) == (13, 5)


@pytest.mark.parametrize(("line", "pci", "pid", "process"), [
    ("NVRM: Xid (PCI:0000:b8:00 GPU-I:02 GPU-C:01): 43, pid=77, name=python3, channel 0x0b00000a", "0000:b8:00", 77, "python3"),
    ("[12345.678901] NVRM: Xid (PCI:0000:00:01.0): 79, pid='<unknown>', name='<unknown>', GPU has fallen off the bus.", "0000:00:01", None, None),
    ("2024-01-15T03:00:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.", "0000:3b:00", 1, "python3"),
    ("2026-09-08T01:00:00+0000 n1 kernel: NVRM: Xid (PCI:0000:01:00): 79", "0000:01:00", None, None),
    ("kern  :warn  : [ 1234.567890] NVRM: Xid (PCI:0000:01:00): 32, pid=2096908, name=kf-phys-oracle, channel 0x00000007 intr1 00000004", "0000:01:00", 2096908, "kf-phys-oracle"),
    ("NVRM: Xid (PCI:0000:01:00): 13, pid=4242, name=Web Content, Graphics SM Warp Exception", "0000:01:00", 4242, "Web Content"),
])
def test_more_variants(line: str, pci: str, pid: int | None, process: str | None) -> None:
    event = parse_line(line, 1)
    assert event is not None and event.kind == "xid"
    assert (event.pci_bus_id, event.pid, event.process) == (pci, pid, process)


def test_follower_memory_stays_bounded() -> None:
    parser = KernelLogParser()
    for i in range(5000):
        parser.feed(f"Out of memory: Killed process {10_000 + i} (worker)", i * 3 + 1)
    assert len(parser._recent_oom) <= 400
    [again] = parser.feed("Out of memory: Killed process 14999 (worker)", 15_100)  # long after: a new kill
    assert again.pid == 14999
