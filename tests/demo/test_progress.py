"""The demo's progress lines: expectations stated, waiting noted, expected alerts ticked off."""

from __future__ import annotations

from watchdog.demo.progress import DemoProgress


def test_progress_ticks_off_expected_alerts() -> None:
    progress = DemoProgress(("GpuThermalMarginLow", "EngineDown"), 40, start=100.0)
    assert progress.opening() == "expecting within 40s: GpuThermalMarginLow, EngineDown"
    assert progress.update(101, []) == []
    assert progress.update(105, [], ["EngineDown"]) == ["  … 5s, waiting for GpuThermalMarginLow, EngineDown; "
                                                       "pending: EngineDown"]
    assert progress.update(106, []) == []
    assert progress.update(112, ["GpuThermalMarginLow", "HostOomKill"]) == [
        "  ✓ GpuThermalMarginLow fired after 12s (1/2 expected)",
        "  • HostOomKill fired after 12s (not in the scenario's expectations)",
        "  … 12s, waiting for EngineDown"]
    assert progress.update(113, ["GpuThermalMarginLow", "HostOomKill"]) == []
    assert progress.summary() == ("demo finished: ✓ GpuThermalMarginLow, ✗ EngineDown (did not fire); "
                                  "not expected: HostOomKill")
    assert progress.update(130, ["EngineDown"]) == ["  ✓ EngineDown fired after 30s (2/2 expected)"]
    assert progress.update(160, []) == []  # nothing left to wait for


def test_a_quiet_scenario_says_so() -> None:
    progress = DemoProgress((), 30, start=0.0)
    assert progress.opening() == "this scenario expects no alert: a quiet node"
    assert progress.update(30, []) == []
    assert progress.summary() == "demo finished: no alert expected"


def test_alerts_along_the_way_are_expected_not_surprises() -> None:
    progress = DemoProgress(("GpuThermalMarginLow",), 40, start=0.0, also=("GpuHwSlowdown", "EngineDown"))
    assert progress.opening() == "expecting within 40s: GpuThermalMarginLow; along the way: GpuHwSlowdown, EngineDown"
    assert progress.update(10, ["GpuThermalMarginLow"]) == ["  ✓ GpuThermalMarginLow fired after 10s (1/1 expected)"]
    assert progress.update(90, ["GpuHwSlowdown", "HostOomKill"]) == [
        "  ✓ GpuHwSlowdown fired after 90s (expected along the way)",
        "  • HostOomKill fired after 90s (not in the scenario's expectations)"]
    assert progress.summary() == ("demo finished: ✓ GpuThermalMarginLow; along the way: ✓ GpuHwSlowdown, "
                                  "✗ EngineDown (not yet); not expected: HostOomKill")
