"""The rule engine's state across restarts (real SQLite)."""

from __future__ import annotations

from pathlib import Path

from watchdog.infra.state import StateDB
from watchdog.rules.state_store import RuleStateStore

NOW = 1_800_000_000_000


def test_rule_engine_state_round_trips_and_is_written_only_on_change(tmp_path: Path) -> None:
    db = StateDB.in_dir(tmp_path)
    store = RuleStateStore(db)
    state = [{"rule": "GpuHot", "labels": {"gpu": "1"}, "active_at_ms": 5, "fired_at_ms": 9}]
    assert store.save(state, NOW) is True
    assert store.save(state, NOW + 1) is False
    db.close()
    fresh = RuleStateStore(StateDB.in_dir(tmp_path))
    assert fresh.save(state) is False  # a new instance compares with the stored digest
    assert fresh.load() == state
    assert fresh.save([*state, {"rule": "EngineDown"}]) is True
