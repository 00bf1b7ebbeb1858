"""Item 8: a kernel-log storm is absorbed at the parser's speed, a line without a newline is bounded,
and Xid events are mapped to their GPU when the collectors are built the way ``run`` builds them."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from watchdog.agent import Agent
from watchdog.collectors.kmsg import XID_ERRORS, KmsgCollector
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config
from watchdog.fakes.pynvml import FakeNvml
from watchdog.infra.state import StateDB
from watchdog.kmsg.follow import MAX_LINE_BYTES, FileFollower
from watchdog.model import label_value, metric_name

XID = "[{t}] NVRM: Xid (PCI:0000:{bus}:00): {xid}, pid=4242, name=python3, Graphics SM Warp Exception\n"


def test_a_storm_of_xid_lines_is_absorbed_quickly_with_exact_counters(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("".join(XID.format(t=i, bus="18", xid=13) for i in range(20_000)))
    db = StateDB(tmp_path / "state.db")
    collector = KmsgCollector(lambda cursor: FileFollower(log, cursor), db, source_key="file",
                              nvml=FakeNvml.from_profile("h100-sxm-8"), boot_id="b1", clock=lambda: 1.8e9)
    started = time.monotonic()
    samples = collector.collect()
    elapsed = time.monotonic() - started
    (xid13,) = [s for s in samples if metric_name(s.labels) == XID_ERRORS]
    assert xid13.value == 20_000.0
    assert label_value(xid13.labels, "gpu") == "0"
    assert elapsed < 10.0  # ~80 s before: a query over stored rows per event
    (row,) = db.query("SELECT COUNT(*) AS n FROM kmsg_events")
    assert row["n"] <= 50  # aggregated, not 20 000 rows pushing older events out


def test_a_line_without_a_newline_is_bounded(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"A" * (3 * 1024 * 1024))
    follower = FileFollower(log, max_bytes=1024 * 1024)
    pieces = [line for _ in range(4) for line in follower.read()]
    assert pieces and all(len(line) <= MAX_LINE_BYTES for line in pieces)
    with open(log, "a") as handle:
        handle.write("\n" + XID.format(t=1, bus="18", xid=79))
    assert any("Xid" in line for line in follower.read())


@pytest.fixture
def pynvml_is_the_fake(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml.from_profile("h100-sxm-8")
    monkeypatch.setitem(sys.modules, "pynvml", fake)  # what `import pynvml` finds on a GPU node
    return fake


def test_xids_map_to_their_gpu_when_built_like_run(tmp_path: Path, pynvml_is_the_fake: FakeNvml) -> None:
    log = tmp_path / "kern.log"
    log.write_text(XID.format(t=1, bus="18", xid=79) + XID.format(t=2, bus="3a", xid=79))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "rules": {"paths": []},
                                    "kmsg": {"source": str(log)}, "processes": {"enabled": False},
                                    "collectors": {"host": {"enabled": False}},
                                    "notifiers": {"log": {"enabled": False}}}))
    settings = settings_from_config(load_config_text(path.read_text(), str(path)))
    agent = Agent(settings, config_path=path)  # exactly as `inference-watchdog run` constructs it
    try:
        agent.tick()
        gpus = sorted(label_value(s.labels, "gpu") for s in agent.store.select([("__name__", "=", XID_ERRORS)]))
        assert gpus == ["0", "2"]  # two dead GPUs, two series: not one gpu="unknown"
    finally:
        agent.close()
