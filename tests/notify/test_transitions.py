"""Transition derivation and grouping: pure, with literal inputs."""

from __future__ import annotations

from dataclasses import replace

from tests.notify.alerts import make_alert, xid_storm
from watchdog.model import AlertState
from watchdog.notify.decisions.grouping import group_transitions, member_description
from watchdog.notify.decisions.model import Transition
from watchdog.notify.decisions.transitions import derive_transitions


def _known(alerts, state="firing"):
    return {a.fingerprint: replace(a, state=AlertState(state)) for a in alerts}


def test_new_firing_alert_is_one_transition_and_pending_is_none() -> None:
    firing = make_alert("GpuHot", gpu="0")
    pending = make_alert("GpuHot", "pending", gpu="1")
    d = derive_transitions({}, [firing, pending], now_ms=2_000_000)
    assert [(t.kind, t.alert.fingerprint) for t in d.transitions] == [("firing", firing.fingerprint)]
    assert {k.fingerprint: k.state for k in d.upserts} == {
        firing.fingerprint: "firing",
        pending.fingerprint: "pending",
    }


def test_still_firing_produces_nothing_even_with_a_new_fired_at() -> None:
    a = make_alert("GpuHot", gpu="0")
    restored = make_alert("GpuHot", gpu="0", fired_at_ms=a.fired_at_ms + 5000)
    d = derive_transitions(_known([a]), [restored], now_ms=2_000_000)
    assert d.transitions == [] and d.upserts == []


def test_resolved_alert_is_one_transition_with_resolution_time() -> None:
    a = make_alert("GpuHot", gpu="0")
    gone = make_alert("GpuHot", "resolved", gpu="0", resolved_at_ms=1_500_000)
    d = derive_transitions(_known([a]), [gone], now_ms=2_000_000)
    assert [(t.kind, t.alert.resolved_at_ms, t.alert.fired_at_ms) for t in d.transitions] == [
        ("resolved", 1_500_000, a.fired_at_ms)
    ]
    again = derive_transitions({k.fingerprint: k for k in d.upserts}, [gone], now_ms=2_001_000)
    assert again.transitions == []


def test_alert_gone_from_engine_list_resolves_at_now() -> None:
    a = make_alert("GpuHot", gpu="0")
    d = derive_transitions(_known([a]), [], now_ms=2_000_000)
    assert [(t.kind, t.alert.resolved_at_ms) for t in d.transitions] == [("resolved", 2_000_000)]


def test_firing_then_pending_means_it_resolved_in_between() -> None:
    a = make_alert("GpuHot", gpu="0")
    pending_again = make_alert("GpuHot", "pending", gpu="0", fired_at_ms=1_900_000)
    d = derive_transitions(_known([a]), [pending_again], now_ms=2_000_000)
    assert [t.kind for t in d.transitions] == ["resolved"]
    assert [k.state for k in d.upserts] == ["pending"]


def test_refiring_after_resolve_is_a_new_episode_with_a_new_key() -> None:
    a = make_alert("GpuHot", gpu="0")
    resolved = _known([a], state="resolved")
    b = make_alert("GpuHot", gpu="0", fired_at_ms=3_000_000)
    d = derive_transitions(resolved, [b], now_ms=3_000_000)
    assert [t.key for t in d.transitions] == [f"{a.fingerprint}:firing:3000000"]


def test_pending_that_goes_away_is_forgotten() -> None:
    p = make_alert("GpuHot", "pending", gpu="0")
    d = derive_transitions(_known([p], state="pending"), [], now_ms=2_000_000)
    assert d.transitions == [] and d.deletes == [p.fingerprint]


def test_same_cause_groups_into_one_notification_with_members_in_gpu_order() -> None:
    storm = xid_storm(gpus=12)
    other = make_alert("GpuHot", gpu="3")
    transitions = [Transition("firing", a) for a in [*reversed(storm), other]]
    groups = group_transitions(transitions, at_ms=1)
    assert [len(g.members) for g in groups] == [12, 1]
    assert [m.labels["gpu"] for m in groups[0].members] == [str(i) for i in range(12)]
    assert member_description(groups[0].members[0]) == "gpu=0 uuid=GPU-0000"
    assert groups[0].key == group_transitions(list(reversed(transitions)), at_ms=9)[1].key


def test_different_xid_or_severity_is_a_different_cause() -> None:
    a = make_alert("GpuXidError", gpu="0", xid="79")
    b = make_alert("GpuXidError", gpu="1", xid="48")
    c = make_alert("GpuXidError", gpu="2", xid="79", severity="warning")
    groups = group_transitions([Transition("firing", x) for x in (a, b, c)], at_ms=1)
    assert len(groups) == 3


def test_grouping_disabled_keeps_every_alert_apart() -> None:
    transitions = [Transition("firing", a) for a in xid_storm(gpus=3)]
    assert len(group_transitions(transitions, at_ms=1, enabled=False)) == 3


def test_stored_keys_and_shapes_are_pinned() -> None:
    """Idempotency keys and the persisted snapshot are stored (outbox rows, ``notify_alerts``) and must
    survive any refactoring of the alert model byte for byte: a state that became an Enum must still
    format as ``firing``, not ``AlertState.FIRING``."""
    from watchdog.model import Alert, AlertState
    from watchdog.notify.decisions.model import GroupNotification

    def alert(fp: str, gpu: str) -> Alert:
        return Alert("GpuHot", {"alertname": "GpuHot", "gpu": gpu, "severity": "warning"}, {"summary": "hot"},
                     AlertState.FIRING, 91.5, fp, active_at_ms=1_000, fired_at_ms=61_000, generator="gpu_temp > 90")

    d = derive_transitions({}, [alert("0123abcd", "0"), alert("4567ef01", "1")], now_ms=70_000)
    assert [t.key for t in d.transitions] == ["0123abcd:firing:61000", "4567ef01:firing:61000"]
    assert [str(k.state) for k in d.upserts] == ["firing", "firing"]
    group = GroupNotification(d.transitions[0].kind, tuple(t.alert for t in d.transitions), 70_000)
    assert group.key == "group:firing:37b1a88a791956d20e08"
    assert GroupNotification("firing", (d.transitions[0].alert,), 70_000).key == "0123abcd:firing:61000"
    assert d.transitions[0].alert.to_json() == {
        "fingerprint": "0123abcd", "name": "GpuHot",
        "labels": {"alertname": "GpuHot", "gpu": "0", "severity": "warning"}, "annotations": {"summary": "hot"},
        "value": 91.5, "fired_at_ms": 61_000, "resolved_at_ms": 0, "generator": "gpu_temp > 90"}
    gone = derive_transitions({k.fingerprint: k for k in d.upserts}, [], now_ms=80_000)
    assert [t.key for t in gone.transitions] == ["0123abcd:resolved:61000", "4567ef01:resolved:61000"]


def test_states_are_one_enum_stored_as_plain_text(tmp_path) -> None:
    """The notify side's states are ``AlertState`` members; ``notify_alerts.state`` holds the bare value and
    reads back as the same member, and outbox kinds and log events carry the value, not the member's name."""
    from watchdog.infra.state import StateDB
    from watchdog.model import AlertState
    from watchdog.notify.channels.log import alert_fields
    from watchdog.notify.decisions.model import GroupNotification
    from watchdog.notify.delivery.state_store import AlertStateStore

    a = make_alert("GpuHot", gpu="0", fired_at_ms=61_000)
    d = derive_transitions({}, [a], now_ms=70_000)
    gone = derive_transitions({k.fingerprint: k for k in d.upserts}, [], now_ms=80_000)
    assert [t.kind for t in gone.transitions] == [AlertState.RESOLVED]
    db = StateDB(tmp_path / "state.db")
    store = AlertStateStore(db)
    with db.transaction() as cur:
        store.upsert_alert(cur, gone.upserts[0], 80_000)
    assert [r["state"] for r in db.query("SELECT state FROM notify_alerts")] == ["resolved"]
    assert store.load_alerts()[a.fingerprint].state is AlertState.RESOLVED
    db.close()
    group = GroupNotification(AlertState.RESOLVED, (gone.transitions[0].alert,), 80_000)
    assert alert_fields(group.kind, group.lead, "node-1", group)["event"] == "alert_resolved"


# A notify_alerts row and a Slack message as the code before Alert was the stored type wrote them
# (notify.model.AlertSnapshot, json.dumps of its asdict), byte for byte, in the table's shape of that time
# (the alert's Slack message key in notify_alerts; tests/notify/test_slack_store.py migrates it).
OLD_SNAPSHOT = ('{"fingerprint": "0123abcd", "name": "GpuHot", "labels": {"alertname": "GpuHot", "gpu": "0", '
                '"severity": "warning"}, "annotations": {"summary": "hot"}, "value": 91.5, "fired_at_ms": 61000, '
                '"resolved_at_ms": 0, "generator": "gpu_temp > 90"}')
OLD_ROW = ("0123abcd", "GpuHot", "firing", OLD_SNAPSHOT, 1_000, 61_000, 0, 0, "slack:0123abcd", 70_000)


def test_rows_written_in_the_old_shape_read_back_and_rewrite_byte_for_byte(tmp_path) -> None:
    """A state database written before ``Alert`` replaced the notification snapshot: its firing row loads
    as the same alert, is written back unchanged, and resolving it derives the same key and snapshot."""
    import json
    import sqlite3

    from tests.notify.test_slack_store import write_old_database
    from watchdog.infra.state import StateDB
    from watchdog.model import Alert
    from watchdog.notify.channels.slack.store import SlackStore
    from watchdog.notify.delivery.state_store import AlertStateStore

    write_old_database(tmp_path / "state.db")
    old = sqlite3.connect(tmp_path / "state.db")
    old.execute("DELETE FROM notify_alerts")
    old.execute("DELETE FROM notify_slack_messages")
    columns = ("fingerprint, alertname, state, snapshot, active_at_ms, fired_at_ms, keep_firing_since_ms, "
               "resolved_at_ms, slack_message_key, updated_ms")
    old.execute(f"INSERT INTO notify_alerts({columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", OLD_ROW)
    old.execute("INSERT INTO notify_slack_messages(message_key, members, created_ms) VALUES (?, ?, ?)",
                ("slack:0123abcd", f"[{OLD_SNAPSHOT}]", 70_000))
    old.commit()
    old.close()
    db = StateDB(tmp_path / "state.db")
    store, slack = AlertStateStore(db), SlackStore(db)

    def message_of(known: dict[str, Alert]) -> str:
        with db.transaction() as cur:
            return slack.listing(cur, known).of("0123abcd")

    known = store.load_alerts()["0123abcd"]
    assert known.state is AlertState.FIRING and message_of({"0123abcd": known}) == "slack:0123abcd"
    assert (known.active_at_ms, known.fired_at_ms, known.value) == (1_000, 61_000, 91.5)
    assert json.dumps(known.to_json()) == OLD_SNAPSHOT
    assert Alert.from_json(known.to_json(), AlertState.FIRING, active_at_ms=1_000) == known

    with db.transaction() as cur:
        cur.execute("DELETE FROM notify_alerts")
        store.upsert_alert(cur, known, 70_000)
    stored = columns.replace("slack_message_key, ", "")
    assert tuple(db.query(f"SELECT {stored} FROM notify_alerts")[0]) == (*OLD_ROW[:8], *OLD_ROW[9:])
    found = slack.message("slack:0123abcd")
    assert found is not None and [json.dumps(m.to_json()) for m in found[2]] == [OLD_SNAPSHOT]
    assert found[2][0].state is AlertState.FIRING  # a stored member's state follows from its times

    gone = derive_transitions({"0123abcd": known}, [], now_ms=80_000)
    assert [t.key for t in gone.transitions] == ["0123abcd:resolved:61000"]
    resolved = gone.upserts[0]
    assert (resolved.state, message_of({"0123abcd": resolved}), resolved.active_at_ms) == (
        AlertState.RESOLVED, "slack:0123abcd", 1_000)
    resolved_json = OLD_SNAPSHOT.replace('"resolved_at_ms": 0', '"resolved_at_ms": 80000')
    assert json.dumps(resolved.to_json()) == resolved_json
    db.close()


def test_what_the_notification_side_keeps_shares_no_dict_with_the_engine() -> None:
    a = make_alert("GpuHot", gpu="0")
    d = derive_transitions({}, [a], now_ms=2_000_000)
    a.labels["gpu"], a.annotations["summary"] = "7", "changed"
    kept = d.upserts[0]
    assert (kept.labels["gpu"], d.transitions[0].alert.annotations["summary"]) == ("0", "GpuHot on {'gpu': '0'}")
