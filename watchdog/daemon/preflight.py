"""Start-up checks beyond the schema: everything ``run`` would refuse when it starts, found before it
starts. ``run`` and ``config check`` both call :func:`preflight` right after loading the file, so they
reject the same configs with the same one-line message (``file:line: key: problem``) and exit code 2,
and no start-up error reaches the user as a traceback.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from watchdog.config.loader import ConfigError
from watchdog.config.settings import Settings

SYSTEMD_WATCHDOG_SECONDS = 60.0
"""``WatchdogSec`` (and ``TimeoutStartSec``) of the shipped unit: a tick must fit well inside it."""


def preflight(settings: Settings, file: str) -> None:
    """Raise :class:`ConfigError` for the first start-up problem of ``settings`` (see module docstring)."""
    _finite(settings, file, [])
    _engines(settings, file)
    _tick_fits_watchdog(settings, file)
    _listen(settings, file)
    _state_dir(settings, file)
    _rules(settings, file)
    _exporter(settings, file)


def _finite(node: Any, file: str, path: list[str]) -> None:
    if isinstance(node, float) and not math.isfinite(node):
        raise ConfigError(file, ".".join(path), f"{node} is not a finite number")
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            _finite(getattr(node, f.name), file, [*path, f.name])
    elif isinstance(node, Mapping):
        for key, value in node.items():
            _finite(value, file, [*path, str(key)])
    elif isinstance(node, tuple):
        for index, value in enumerate(node):
            _finite(value, file, [*path, str(index)])


def _engines(settings: Settings, file: str) -> None:
    seen: set[str] = set()
    for index, engine in enumerate(settings.engines):
        if engine.job in seen:
            raise ConfigError(file, f"engines.{index}.job", f"job {engine.job!r} is used by two engines")
        seen.add(engine.job)
        if engine.process.match:
            try:
                re.compile(engine.process.match)
            except re.error as exc:
                raise ConfigError(file, f"engines.{index}.process.match", f"not a valid regex: {exc}") from None


def _tick_fits_watchdog(settings: Settings, file: str) -> None:
    tick = settings.tick_interval_seconds
    timeouts = {
        "kmsg.timeout_seconds": settings.kmsg.timeout_seconds,
        "collectors.nvml.timeout_seconds": settings.collectors.nvml.timeout_seconds,
        **{f"engines.{i}.scrape_timeout_seconds": e.scrape_timeout_seconds for i, e in enumerate(settings.engines)},
    }
    for key, value in timeouts.items():
        if float(value) + 1 + tick >= SYSTEMD_WATCHDOG_SECONDS:
            raise ConfigError(file, key, f"{value}s plus a {tick:g}s tick does not fit the unit's "
                                         f"WatchdogSec={SYSTEMD_WATCHDOG_SECONDS:g}s")


def _listen(settings: Settings, file: str) -> None:
    from watchdog.exporter.server import parse_listen

    try:
        _host, port = parse_listen(settings.listen)
    except ValueError as exc:
        raise ConfigError(file, "listen", str(exc)) from None
    if not 0 <= port < 65536:  # 0: any free port (tests, the demo)
        raise ConfigError(file, "listen", f"port {port} is outside 0-65535")


def _state_dir(settings: Settings, file: str) -> None:
    state_dir = Path(settings.state_dir)
    for candidate in (state_dir, *state_dir.parents):
        if candidate.exists():
            if not candidate.is_dir():
                raise ConfigError(file, "state_dir", f"{candidate} exists and is not a directory")
            return


def _rules(settings: Settings, file: str) -> None:
    from watchdog.rules.loader import RuleLoadError, load_ruleset

    try:
        load_ruleset(settings)
    except RuleLoadError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "rule files do not load"
        raise ConfigError(file, "rules.paths", first) from None


def _exporter(settings: Settings, file: str) -> None:
    from watchdog.exporter.access import ExporterConfigError
    from watchdog.exporter.security import load_security

    try:
        load_security(settings.exporter)
    except ExporterConfigError as exc:
        raise ConfigError(file, "exporter", str(exc)) from None
