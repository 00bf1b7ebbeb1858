"""Which notifications a notifier does not send: silenced (ours or Alertmanager's) or inhibited.

Contract (used by the dispatcher once per tick and notifier; no network I/O here):

- An alert that starts firing while it matches one of our active silences, or is inhibited by a firing
  alert (``notifiers.inhibit_rules``), is not announced by any notifier; Alertmanager's active silences
  (read in the background, see :class:`AlertmanagerSilences`) mute it for the Slack notifier only (an
  Alertmanager applies its own silences to what it routes).
- A muted alert's resolve and its runbook events are not sent either (the notifier never announced it).
  An alert announced before a silence began still gets its resolve. Muting is decided when the alert
  starts firing: a silence that ends while the alert still fires does not announce it afterwards.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from watchdog.model import AlertState
from watchdog.notify.model import EventNotification, GroupNotification
from watchdog.notify.silences import AlertmanagerSilences, InhibitRule, Silence, SilenceStore, inhibited

log = logging.getLogger("watchdog.notify.muting")

AM_SILENCED_NOTIFIERS = frozenset({"slack"})


class Muting:
    """See the module docstring."""

    def __init__(self, store: SilenceStore, inhibit_rules: Sequence[InhibitRule] = (),
                 alertmanager: AlertmanagerSilences | None = None) -> None:
        self.store = store
        self.inhibit_rules = tuple(inhibit_rules)
        self.alertmanager = alertmanager
        self._muted: dict[str, set[str]] = {}

    def muted(self, notifier: str) -> frozenset[str]:
        """Fingerprints ``notifier`` did not announce (and must not re-send)."""
        return frozenset(self._muted.get(notifier, ()))

    def reason(self, notifier: str, labels: Mapping[str, str], firing: Sequence[Mapping[str, str]],
               now_ms: int, local: Sequence[Silence] | None = None) -> str:
        """Why ``notifier`` must not announce an alert with ``labels`` ("" when it may); ``local``: our
        active silences when the caller already read them."""
        silences = list(self.store.active(now_ms) if local is None else local)
        if self.alertmanager is not None and notifier in AM_SILENCED_NOTIFIERS:
            silences.extend(self.alertmanager.cached())
        for silence in silences:
            if silence.matches(labels, now_ms):
                return f"silenced by {silence.source} silence {silence.id} ({silence.comment})"
        if self.inhibit_rules and inhibited(labels, firing, self.inhibit_rules):
            return "inhibited"
        return ""

    def apply(self, notifier: str, groups: Iterable[GroupNotification], notes: Iterable[EventNotification],
              firing: Sequence[Mapping[str, str]], now_ms: int,
              ) -> tuple[list[GroupNotification], list[EventNotification]]:
        """The groups and events ``notifier`` sends, muted members removed (see the module docstring)."""
        muted = self._muted.setdefault(notifier, set())
        groups = list(groups)
        local = self.store.active(now_ms) if any(g.kind is AlertState.FIRING for g in groups) else []
        kept_groups: list[GroupNotification] = []
        for group in groups:
            members = []
            for member in group.members:
                if group.kind is AlertState.FIRING:
                    why = self.reason(notifier, member.labels, firing, now_ms, local)
                    if why:
                        muted.add(member.fingerprint)
                        log.info("notification muted", extra={"notifier": notifier, "alertname": member.name,
                                                               "fingerprint": member.fingerprint, "reason": why})
                        continue
                    muted.discard(member.fingerprint)
                elif member.fingerprint in muted:
                    muted.discard(member.fingerprint)
                    continue
                members.append(member)
            if members:
                kept_groups.append(replace(group, members=tuple(members)))
        kept_notes = [n for n in notes if n.event.fingerprint not in muted]
        return kept_groups, kept_notes
