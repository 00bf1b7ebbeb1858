"""Which notifications a notifier does not send: silenced (ours or Alertmanager's) or inhibited.

Contract (used by the dispatcher once per tick and notifier; no network I/O here):

- An alert that starts firing while it matches one of our active silences, or is inhibited by a firing
  alert (``notifiers.inhibit_rules``), is not announced by any notifier; Alertmanager's active silences
  (read in the background, see :class:`AlertmanagerSilences`) mute it for the Slack notifier only (an
  Alertmanager applies its own silences to what it routes).
- A muted alert's resolve and its runbook events are not sent either (the notifier never announced it).
  An alert announced before a silence began still gets its resolve.
- As in Alertmanager, muting is looked at again every tick: when the silence of an alert that still fires
  expires (or its inhibiting alert resolves), the alert is announced then, once, as a firing notification
  with its original start.
- Which alerts each notifier left unannounced is kept in the state database (table ``notify_muted``,
  component ``notify.muting``): each tick the dispatcher calls :meth:`Muting.begin`, :meth:`Muting.apply`
  per notifier and :meth:`Muting.save` in its transaction, then :meth:`Muting.commit` once that committed
  (a tick whose transaction failed leaves the committed state as it was, to be tried again). So a restart (or a
  reload, which builds a new :class:`Muting`) neither announces a muted alert that still fires nor
  forgets to announce one whose silence expired meanwhile.
- :meth:`Muting.suppression` says, for ``/api/v1/alerts``, which silences (ours and Alertmanager's) and
  which firing alerts suppress each alert, in Alertmanager's ``silencedBy``/``inhibitedBy`` terms.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from watchdog.model import Alert, AlertState
from watchdog.notify.decisions.model import EventNotification, GroupNotification
from watchdog.notify.decisions.silences import AlertmanagerSilences, InhibitRule, Silence, SilenceStore, inhibitors

log = logging.getLogger("watchdog.notify.muting")

AM_SILENCED_NOTIFIERS = frozenset({"slack"})
COMPONENT = "notify.muting"
SCHEMA_VERSION = 1
DDL = (
    """CREATE TABLE IF NOT EXISTS notify_muted (
        notifier TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        since_ms INTEGER NOT NULL,
        PRIMARY KEY (notifier, fingerprint))""",
)

MutedSets = dict[str, dict[str, int]]
"""notifier -> fingerprint of an alert it did not announce -> when it was muted (ms)."""


class Suppression(NamedTuple):
    """Why an alert is suppressed: ids of matching active silences, fingerprints of inhibiting alerts."""

    silenced_by: tuple[str, ...]
    inhibited_by: tuple[str, ...]


class Muting:
    """See the module docstring."""

    def __init__(self, store: SilenceStore, inhibit_rules: Sequence[InhibitRule] = (),
                 alertmanager: AlertmanagerSilences | None = None) -> None:
        self.store = store
        self.inhibit_rules = tuple(inhibit_rules)
        self.alertmanager = alertmanager
        store.db.ensure_schema(COMPONENT, SCHEMA_VERSION, DDL)
        self._muted: MutedSets = {}
        for row in store.db.query("SELECT notifier, fingerprint, since_ms FROM notify_muted"):
            self._muted.setdefault(row["notifier"], {})[row["fingerprint"]] = row["since_ms"]
        self._draft: MutedSets | None = None

    def muted(self, notifier: str) -> frozenset[str]:
        """Fingerprints ``notifier`` did not announce (and must not re-send), as last committed."""
        return frozenset(self._muted.get(notifier, {}))

    def changes_due(self, still_firing: Mapping[str, Alert], firing: Sequence[Mapping[str, str]],
                    now_ms: int) -> bool:
        """Whether an alert some notifier left unannounced no longer fires, or fires and is muted no longer
        (read-only: tells the dispatcher a tick with no transitions still has something to store)."""
        if not any(self._muted.values()):
            return False
        local = self.store.active(now_ms)
        return any(fp not in still_firing or not self.reason(notifier, still_firing[fp].labels, firing, now_ms, local)
                   for notifier, fps in self._muted.items() for fp in fps)

    def silences(self, labels: Mapping[str, str], now_ms: int, notifier: str | None = None,
                 local: Sequence[Silence] | None = None) -> list[Silence]:
        """The active silences matching ``labels``: ours, plus Alertmanager's where they apply to
        ``notifier`` (every Alertmanager silence when ``notifier`` is None); ``local``: our active
        silences when the caller already read them."""
        candidates = list(self.store.active(now_ms) if local is None else local)
        if self.alertmanager is not None and (notifier is None or notifier in AM_SILENCED_NOTIFIERS):
            candidates.extend(self.alertmanager.cached())
        return [s for s in candidates if s.matches(labels, now_ms)]

    def reason(self, notifier: str, labels: Mapping[str, str], firing: Sequence[Mapping[str, str]],
               now_ms: int, local: Sequence[Silence] | None = None) -> str:
        """Why ``notifier`` must not announce an alert with ``labels`` ("" when it may); ``local``: our
        active silences when the caller already read them."""
        for silence in self.silences(labels, now_ms, notifier, local):
            return f"silenced by {silence.source} silence {silence.id} ({silence.comment})"
        if self.inhibit_rules and inhibitors(labels, firing, self.inhibit_rules):
            return "inhibited"
        return ""

    def suppression(self, alerts: Sequence[Alert], now_ms: int) -> dict[str, Suppression]:
        """For each of ``alerts`` that is suppressed, by fingerprint: the silences matching it (ours and
        Alertmanager's) and the firing alerts among ``alerts`` that inhibit it."""
        local = self.store.active(now_ms)
        firing = {a.fingerprint: a.labels for a in alerts if a.state is AlertState.FIRING}
        by_labels = {tuple(sorted(labels.items())): fp for fp, labels in firing.items()}
        out: dict[str, Suppression] = {}
        for alert in alerts:
            silenced = tuple(s.id for s in self.silences(alert.labels, now_ms, None, local))
            sources = inhibitors(alert.labels, list(firing.values()), self.inhibit_rules) if self.inhibit_rules else []
            inhibited = tuple(sorted(by_labels[tuple(sorted(s.items()))] for s in sources))
            if silenced or inhibited:
                out[alert.fingerprint] = Suppression(silenced, inhibited)
        return out

    def apply(self, notifier: str, groups: Iterable[GroupNotification], notes: Iterable[EventNotification],
              firing: Sequence[Mapping[str, str]], now_ms: int,
              still_firing: Mapping[str, Alert] | None = None,
              ) -> tuple[list[GroupNotification], list[EventNotification]]:
        """The groups and events ``notifier`` sends, muted members removed, plus one firing group per alert
        it left unannounced that fires on (``still_firing``: the alerts firing now, by fingerprint) and is
        muted no longer (see the module docstring). Changes the draft of :meth:`begin` (begun if none)."""
        draft = self._draft if self._draft is not None else self.begin()
        muted = draft.setdefault(notifier, {})
        groups = list(groups)
        local = self.store.active(now_ms) if muted or any(g.kind is AlertState.FIRING for g in groups) else []
        kept_groups: list[GroupNotification] = []
        for group in groups:
            members = []
            for member in group.members:
                if group.kind is AlertState.FIRING:
                    why = self.reason(notifier, member.labels, firing, now_ms, local)
                    if why:
                        muted.setdefault(member.fingerprint, now_ms)
                        log.info("notification muted", extra={"notifier": notifier, "alertname": member.name,
                                                               "fingerprint": member.fingerprint, "reason": why})
                        continue
                    muted.pop(member.fingerprint, None)
                elif member.fingerprint in muted:
                    muted.pop(member.fingerprint)
                    continue
                members.append(member)
            if members:
                kept_groups.append(replace(group, members=tuple(members)))
        if still_firing is not None:
            kept_groups.extend(self._released(notifier, muted, still_firing, firing, now_ms, local))
        kept_notes = [n for n in notes if n.event.fingerprint not in muted]
        return kept_groups, kept_notes

    def _released(self, notifier: str, muted: dict[str, int], still_firing: Mapping[str, Alert],
                  firing: Sequence[Mapping[str, str]], now_ms: int,
                  local: Sequence[Silence]) -> list[GroupNotification]:
        """Firing groups for the muted alerts of ``notifier`` that fire on unmuted; forgets muted alerts
        that no longer fire (their resolve, if any, was left out above)."""
        out = []
        for fingerprint in sorted(muted):
            alert = still_firing.get(fingerprint)
            if alert is None:
                del muted[fingerprint]
            elif not self.reason(notifier, alert.labels, firing, now_ms, local):
                del muted[fingerprint]
                log.info("notification no longer muted: announcing it", extra={
                    "notifier": notifier, "alertname": alert.name, "fingerprint": fingerprint})
                out.append(GroupNotification(kind=AlertState.FIRING, members=(alert,), at_ms=now_ms))
        return out

    def begin(self) -> MutedSets:
        """Start (and return) the tick's draft from what is committed; a failed tick's draft is dropped."""
        self._draft = {name: dict(fps) for name, fps in self._muted.items()}
        return self._draft

    def save(self, cur: sqlite3.Cursor) -> None:
        """Write the draft's changes to ``notify_muted`` inside the caller's transaction."""
        if self._draft is None:
            return
        before = {(n, fp) for n, fps in self._muted.items() for fp in fps}
        after = {(n, fp): since for n, fps in self._draft.items() for fp, since in fps.items()}
        cur.executemany("DELETE FROM notify_muted WHERE notifier = ? AND fingerprint = ?",
                        sorted(before - set(after)))
        cur.executemany("INSERT OR IGNORE INTO notify_muted(notifier, fingerprint, since_ms) VALUES (?, ?, ?)",
                        [(n, fp, since) for (n, fp), since in sorted(after.items()) if (n, fp) not in before])

    def commit(self) -> None:
        """The saved draft is now what :meth:`muted` answers (its transaction committed)."""
        if self._draft is not None:
            self._muted = {name: fps for name, fps in self._draft.items() if fps}
            self._draft = None
