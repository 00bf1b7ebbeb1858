"""Start-up checks beyond the schema: everything ``run`` would refuse when it starts, found before it
starts. ``run`` and ``config check`` both call :func:`preflight` right after loading the file, so they
reject the same configs with the same one-line message (``file:line: key: problem``) and exit code 2,
and no start-up error reaches the user as a traceback.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from watchdog.config.loader import ConfigError

SYSTEMD_WATCHDOG_SECONDS = 60.0
"""``WatchdogSec`` (and ``TimeoutStartSec``) of the shipped unit: a tick must fit well inside it."""


def preflight(config: Mapping[str, Any], file: str) -> None:
    """Raise :class:`ConfigError` for the first start-up problem of ``config`` (see module docstring)."""
    _finite(config, file, [])
    _engines(config, file)
    _tick_fits_watchdog(config, file)
    _listen(config, file)
    _state_dir(config, file)
    _rules(config, file)
    _exporter(config, file)


def _finite(node: Any, file: str, path: list[str]) -> None:
    if isinstance(node, float) and not math.isfinite(node):
        raise ConfigError(file, ".".join(path), f"{node} is not a finite number")
    if isinstance(node, Mapping):
        for key, value in node.items():
            _finite(value, file, [*path, str(key)])
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _finite(value, file, [*path, str(index)])


def _engines(config: Mapping[str, Any], file: str) -> None:
    seen: set[str] = set()
    for index, engine in enumerate(config.get("engines") or []):
        job = str(engine.get("job", ""))
        if job in seen:
            raise ConfigError(file, f"engines.{index}.job", f"job {job!r} is used by two engines")
        seen.add(job)
        pattern = (engine.get("process") or {}).get("match")
        if pattern:
            try:
                re.compile(str(pattern))
            except re.error as exc:
                raise ConfigError(file, f"engines.{index}.process.match", f"not a valid regex: {exc}") from None


def _tick_fits_watchdog(config: Mapping[str, Any], file: str) -> None:
    tick = float(config.get("tick_interval_seconds", 1))
    timeouts = {
        "kmsg.timeout_seconds": (config.get("kmsg") or {}).get("timeout_seconds", 5),
        "collectors.nvml.timeout_seconds": ((config.get("collectors") or {}).get("nvml") or {}).get(
            "timeout_seconds", 2),
        **{f"engines.{i}.scrape_timeout_seconds": e.get("scrape_timeout_seconds", 2)
           for i, e in enumerate(config.get("engines") or [])},
    }
    for key, value in timeouts.items():
        if float(value) + 1 + tick >= SYSTEMD_WATCHDOG_SECONDS:
            raise ConfigError(file, key, f"{value}s plus a {tick:g}s tick does not fit the unit's "
                                         f"WatchdogSec={SYSTEMD_WATCHDOG_SECONDS:g}s")


def _listen(config: Mapping[str, Any], file: str) -> None:
    from watchdog.exporter.server import parse_listen

    try:
        _host, port = parse_listen(str(config.get("listen", "")))
    except ValueError as exc:
        raise ConfigError(file, "listen", str(exc)) from None
    if not 0 <= port < 65536:  # 0: any free port (tests, the demo)
        raise ConfigError(file, "listen", f"port {port} is outside 0-65535")


def _state_dir(config: Mapping[str, Any], file: str) -> None:
    state_dir = Path(str(config.get("state_dir", "")))
    for candidate in (state_dir, *state_dir.parents):
        if candidate.exists():
            if not candidate.is_dir():
                raise ConfigError(file, "state_dir", f"{candidate} exists and is not a directory")
            return


def _rules(config: Mapping[str, Any], file: str) -> None:
    from watchdog.rules.loader import RuleLoadError, load_ruleset

    try:
        load_ruleset(config)
    except RuleLoadError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "rule files do not load"
        raise ConfigError(file, "rules.paths", first) from None


def _exporter(config: Mapping[str, Any], file: str) -> None:
    from watchdog.exporter.security import ExporterConfigError, load_security

    try:
        load_security(config.get("exporter") or {})
    except ExporterConfigError as exc:
        raise ConfigError(file, "exporter", str(exc)) from None
