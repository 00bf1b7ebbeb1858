"""Silences (ours, stored in the state database, and Alertmanager's, read through its API v2) and
Alertmanager-style inhibit rules.

Contract:

- :class:`Matcher` is amtool's: ``name=value``, ``name!=value``, ``name=~regex``, ``name!~regex``;
  regexes are fully anchored, as in Alertmanager. A silence matches an alert when every matcher does.
- :class:`SilenceStore` keeps silences in the table ``silences`` (component ``silences``): id, matchers,
  start, end, author, comment. ``expire`` sets the end to now; expired silences stay listed (history).
- :class:`AlertmanagerSilences` reads ``GET /api/v2/silences`` of the first reachable URL on its own
  daemon thread every ``refresh_seconds`` (:meth:`~AlertmanagerSilences.refresh`) and keeps the active
  ones; :meth:`~AlertmanagerSilences.cached` never does I/O. An unreachable Alertmanager keeps the last
  answer (and logs once).
- :func:`inhibitors` is Alertmanager's rule: a target alert is inhibited when a *firing* source alert
  matches ``source_matchers``, the target matches ``target_matchers``, the labels in ``equal`` have the
  same value on both (absent = empty), and the target is not the source itself.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from watchdog.infra.logs import redact
from watchdog.infra.state import StateDB

log = logging.getLogger("watchdog.notify.silences")

COMPONENT = "silences"
SCHEMA_VERSION = 1
DDL = (
    """CREATE TABLE IF NOT EXISTS silences (
        id TEXT PRIMARY KEY,
        matchers TEXT NOT NULL,
        starts_ms INTEGER NOT NULL,
        ends_ms INTEGER NOT NULL,
        created_by TEXT NOT NULL,
        comment TEXT NOT NULL,
        created_ms INTEGER NOT NULL
    )""",
)
_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$')


class MatcherError(ValueError):
    """A matcher that cannot be parsed (says which and why)."""


@dataclass(frozen=True)
class Matcher:
    """One label matcher: ``op`` is ``=``, ``!=``, ``=~`` or ``!~``."""

    name: str
    op: str
    value: str

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """``name=value`` etc. (value optionally in double quotes); raises :class:`MatcherError`."""
        match = _MATCHER.match(text)
        if not match:
            raise MatcherError(f"{text!r} is not a matcher: write name=value, name!=value, name=~regex or "
                               "name!~regex (e.g. alertname=GpuThermalMarginLow)")
        name, op, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if "~" in op:
            try:
                re.compile(value)
            except re.error as exc:
                raise MatcherError(f"{text!r}: bad regular expression: {exc}") from exc
        return cls(name, op, value)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Alertmanager semantics: an absent label is the empty string; regexes are anchored."""
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        found = re.fullmatch(self.value, actual) is not None
        return found if self.op == "=~" else not found

    def __str__(self) -> str:
        return f'{self.name}{self.op}"{self.value}"'

    def to_json(self) -> dict[str, Any]:
        """Alertmanager API v2's matcher shape."""
        return {"name": self.name, "value": self.value, "isRegex": "~" in self.op,
                "isEqual": not self.op.startswith("!")}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Matcher:
        """From Alertmanager API v2's shape (``isEqual`` defaults to true, as in Alertmanager)."""
        regex, equal = bool(data.get("isRegex")), bool(data.get("isEqual", True))
        op = ("=~" if equal else "!~") if regex else ("=" if equal else "!=")
        return cls(str(data["name"]), op, str(data["value"]))


def matches_all(matchers: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    """Every matcher matches ``labels``."""
    return all(m.matches(labels) for m in matchers)


@dataclass(frozen=True)
class Silence:
    """One silence; ``source`` is ``local`` or ``alertmanager``."""

    id: str
    matchers: tuple[Matcher, ...]
    starts_ms: int
    ends_ms: int
    created_by: str
    comment: str
    source: str = "local"

    def active(self, now_ms: int) -> bool:
        """In force at ``now_ms``."""
        return self.starts_ms <= now_ms < self.ends_ms

    def matches(self, labels: Mapping[str, str], now_ms: int) -> bool:
        """Active and every matcher matches."""
        return self.active(now_ms) and matches_all(self.matchers, labels)

    def state(self, now_ms: int) -> str:
        """``active``, ``pending`` (starts later) or ``expired``, as Alertmanager says."""
        return "active" if self.active(now_ms) else ("pending" if now_ms < self.starts_ms else "expired")

    def to_json(self, now_ms: int) -> dict[str, Any]:
        """The ``silence list --json`` shape: Alertmanager API v2's ``gettableSilence`` field names with
        RFC 3339 times (``updatedAt`` is the start: a silence here is never edited, only expired, which
        moves ``endsAt``), plus ``source`` (``local`` or ``alertmanager``)."""
        return {"id": self.id, "status": {"state": self.state(now_ms)}, "updatedAt": rfc3339(self.starts_ms),
                "matchers": [m.to_json() for m in self.matchers], "startsAt": rfc3339(self.starts_ms),
                "endsAt": rfc3339(self.ends_ms), "createdBy": self.created_by, "comment": self.comment,
                "source": self.source}


def rfc3339(ms: int) -> str:
    """``ms`` since the epoch as RFC 3339 UTC with milliseconds (``2027-01-15T08:00:00.000Z``), as
    Alertmanager writes times."""
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class SilenceStore:
    """Our silences in the state database; see the module docstring."""

    def __init__(self, db: StateDB) -> None:
        self.db = db
        db.ensure_schema(COMPONENT, SCHEMA_VERSION, DDL)

    def add(self, matchers: Sequence[Matcher], starts_ms: int, ends_ms: int, created_by: str, comment: str,
            now_ms: int) -> Silence:
        """Store a new silence; raises ValueError without matchers or with an end before the start."""
        if not matchers:
            raise ValueError("a silence needs at least one matcher (e.g. alertname=GpuThermalMarginLow)")
        if ends_ms <= starts_ms:
            raise ValueError("a silence must end after it starts")
        silence = Silence(uuid.uuid4().hex, tuple(matchers), starts_ms, ends_ms, redact(created_by),
                          redact(comment))
        self.db.execute(
            "INSERT INTO silences(id, matchers, starts_ms, ends_ms, created_by, comment, created_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (silence.id, json.dumps([m.to_json() for m in matchers]), starts_ms, ends_ms, silence.created_by,
             silence.comment, now_ms))
        return silence

    def all(self) -> list[Silence]:
        """Every silence, newest first."""
        rows = self.db.query("SELECT id, matchers, starts_ms, ends_ms, created_by, comment FROM silences "
                             "ORDER BY created_ms DESC, id")
        return [Silence(r["id"], tuple(Matcher.from_json(m) for m in json.loads(r["matchers"])), r["starts_ms"],
                        r["ends_ms"], r["created_by"], r["comment"]) for r in rows]

    def active(self, now_ms: int) -> list[Silence]:
        """The silences in force at ``now_ms``."""
        return [s for s in self.all() if s.active(now_ms)]

    def expire(self, silence_id: str, now_ms: int) -> Silence | None:
        """End a silence now (by id or unique id prefix); None when no active silence has that id."""
        found = [s for s in self.all() if s.id.startswith(silence_id) and s.ends_ms > now_ms]
        if len(found) != 1:
            return None
        self.db.execute("UPDATE silences SET ends_ms = ? WHERE id = ?", (now_ms, found[0].id))
        return found[0]


class AlertmanagerSilences:
    """Active silences of an Alertmanager (API v2); see the module docstring."""

    def __init__(self, urls: Sequence[str], refresh_seconds: float = 15.0, timeout_seconds: float = 2.0,
                 fetch: Callable[[str, float], bytes] | None = None) -> None:
        self.urls = tuple(urls)
        self.refresh_seconds = refresh_seconds
        self.timeout_seconds = timeout_seconds
        self._fetch = fetch
        self._cached: list[Silence] = []
        self._failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _get(self, url: str) -> bytes:
        if self._fetch is not None:
            return self._fetch(url, self.timeout_seconds)
        with urllib.request.urlopen(url, timeout=self.timeout_seconds) as response:
            body: bytes = response.read(8 << 20)
            return body

    def refresh(self) -> bool:
        """Read the active silences now; False (keeping the last ones) when no URL answered."""
        errors = []
        for base in self.urls:
            try:
                data = json.loads(self._get(base.rstrip("/") + "/api/v2/silences"))
            except (OSError, ValueError) as exc:
                errors.append(f"{base}: {exc}")
                continue
            self._cached = [parse_am_silence(item) for item in data
                            if (item.get("status") or {}).get("state") == "active"]
            self._failing = False
            return True
        if not self._failing:
            log.warning("cannot read Alertmanager silences; keeping the last ones",
                        extra={"error": redact("; ".join(errors))})
        self._failing = True
        return False

    def cached(self) -> list[Silence]:
        """The silences of the last successful :meth:`refresh` (no I/O)."""
        return self._cached

    def start(self) -> None:
        """Refresh once now, then every ``refresh_seconds`` on a daemon thread."""
        self.refresh()

        def loop() -> None:
            while not self._stop.wait(self.refresh_seconds):
                self.refresh()

        self._thread = threading.Thread(target=loop, name="alertmanager-silences", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the refresh thread."""
        self._stop.set()


def _parse_time_ms(text: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def parse_am_silence(item: Mapping[str, Any]) -> Silence:
    """One ``gettableSilence`` of Alertmanager's API v2."""
    return Silence(str(item.get("id", "")), tuple(Matcher.from_json(m) for m in item.get("matchers") or []),
                   _parse_time_ms(str(item["startsAt"])), _parse_time_ms(str(item["endsAt"])),
                   str(item.get("createdBy", "")), str(item.get("comment", "")), source="alertmanager")


@dataclass(frozen=True)
class InhibitRule:
    """Alertmanager's ``inhibit_rules`` entry."""

    source_matchers: tuple[Matcher, ...]
    target_matchers: tuple[Matcher, ...]
    equal: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, rule: Any) -> InhibitRule:
        """From ``notifiers.inhibit_rules[]`` settings (matchers as amtool writes them)."""
        return cls(tuple(Matcher.parse(m) for m in rule.source_matchers),
                   tuple(Matcher.parse(m) for m in rule.target_matchers), tuple(rule.equal))


def inhibitors(target: Mapping[str, str], firing: Iterable[Mapping[str, str]],
               rules: Sequence[InhibitRule]) -> list[Mapping[str, str]]:
    """The ``firing`` alerts' label sets that inhibit ``target`` (empty: not inhibited; see the module doc)."""
    sources = list(firing)
    found: list[Mapping[str, str]] = []
    for source in sources:
        if source is target or dict(source) == dict(target):
            continue
        for rule in rules:
            if matches_all(rule.target_matchers, target) and matches_all(rule.source_matchers, source) and all(
                    source.get(name, "") == target.get(name, "") for name in rule.equal):
                found.append(source)
                break
    return found
