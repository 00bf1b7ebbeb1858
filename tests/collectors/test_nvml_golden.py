"""The NVML collector stores, tick by tick, exactly what the recorded scenario says (tests/support/nvml_golden.py).

The fixture was recorded from the collector before issue 16's fifth pass (its speed work); this requires
the same series, labels, values and staleness at each of the scenario's 20 ticks, through moving loads,
processes coming and going, a failing call, NVLink changes and a GPU falling off the bus and coming back.
"""

from __future__ import annotations

import json

from tests.support.nvml_golden import FIXTURE, TICKS, dumps, run_scenario


def test_the_store_holds_what_the_recorded_collector_stored() -> None:
    recorded = json.loads(FIXTURE.read_text())
    got = run_scenario()
    if got != recorded:
        want_lines = set(dumps(recorded).splitlines())
        got_lines = set(dumps(got).splitlines())
        missing = sorted(want_lines - got_lines)[:5]
        extra = sorted(got_lines - want_lines)[:5]
        raise AssertionError(f"stored series differ from {FIXTURE.name}:\nrecorded, not stored now:\n"
                             + "\n".join(missing) + "\nstored now, not recorded:\n" + "\n".join(extra))


def test_the_recording_covers_the_lost_gpu_and_moving_values() -> None:
    recorded = json.loads(FIXTURE.read_text())
    lost = next(cells for key, cells in recorded.items() if key.startswith('watchdog_gpu_lost{gpu="1"'))
    assert lost[7:14] == [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]  # off the bus from t=9 to t=13
    power = next(cells for key, cells in recorded.items() if key.startswith('watchdog_gpu_power_watts{gpu="1"'))
    assert power[8] == "stale" and power[9:13] == [None] * 4 and len(set(power[:8])) == 8
    nvlink = [key for key in recorded if key.startswith("watchdog_gpu_nvlink_up")]
    assert len(nvlink) == 4 and all(len(cells) == TICKS for cells in recorded.values())
