"""What a reload (SIGHUP) builds before it changes anything: :func:`prepare_reload`.

Everything the config file now describes (settings, rule engine, runbooks, collectors, the notifiers'
and the caller's apply steps) is built and checked first; the first problem raises and nothing has
changed. The keys in :data:`RESTART_KEYS` keep their running value (a restart applies them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from watchdog.agent.build import build_rule_engine, build_runbooks
from watchdog.collectors.base import Collector
from watchdog.collectors.registry import build_collectors
from watchdog.config import load_settings
from watchdog.config.settings import Settings
from watchdog.rules.engine import RuleEngine
from watchdog.runbooks.links import RunbookLinks
from watchdog.runbooks.manager import RunbookManager

if TYPE_CHECKING:
    from watchdog.agent import Agent

RESTART_KEYS = ("node", "state_dir", "listen", "retention_seconds", "max_series", "reserved_series")
"""Settings a reload cannot apply: the node name (in labels already sent), the state database, the
exporter's socket, and the store's ring sizes."""

Preparer = Callable[[Settings], Callable[[], None]]
"""What a reload caller prepares from the new settings: load and check (may raise), return the apply step."""


def changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the settings that differ (down to leaf fields; lists of sections as a whole)."""
    if not (dataclasses.is_dataclass(old) and dataclasses.is_dataclass(new)) or type(old) is not type(new):
        return [prefix] if old != new else []
    out: list[str] = []
    for f in dataclasses.fields(old):
        out.extend(changed_keys(getattr(old, f.name), getattr(new, f.name), f"{prefix}.{f.name}" if prefix
                                else f.name))
    return out


@dataclass
class PreparedReload:
    """Everything a new config describes, built and checked but not yet in use."""

    settings: Settings
    rule_engine: RuleEngine
    runbooks: RunbookManager
    links: RunbookLinks
    collectors: list[Collector]
    apply_steps: list[Callable[[], None]]
    changed: list[str]
    needs_restart: list[str]


def prepare_reload(agent: Agent, also: Sequence[Preparer]) -> PreparedReload:
    """Build everything the config file of ``agent`` now describes; raises on the first problem, changing
    nothing."""
    loaded = load_settings(agent.config_path) if agent.config_path else agent.settings
    changed = changed_keys(agent.settings, loaded)
    needs_restart = [key for key in changed if key.split(".")[0] in RESTART_KEYS]
    settings = dataclasses.replace(loaded, **{key: getattr(agent.settings, key) for key in RESTART_KEYS})
    rule_engine = build_rule_engine(settings, agent.store, restored=agent.rule_engine.export_state())
    runbooks = build_runbooks(settings, agent.db, agent.store, agent.clock, agent.config_path, agent.node)
    try:
        links = RunbookLinks(runbooks.catalogue, settings.runbooks.url_base)
        collectors = build_collectors(settings, agent.context)
        apply_steps = [agent.dispatcher.reconfigure(settings.notifiers, remediation_mode=settings.remediation.mode,
                                                    tick_seconds=settings.tick_interval_seconds,
                                                    listen=settings.listen)]
        apply_steps.extend(prepare(settings) for prepare in also)
    except BaseException:
        runbooks.close()
        raise
    return PreparedReload(settings, rule_engine, runbooks, links, collectors, apply_steps,
                          [key for key in changed if key not in needs_restart], needs_restart)
