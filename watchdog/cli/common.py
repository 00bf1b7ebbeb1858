"""Helpers every subcommand with a ``--config`` shares."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from watchdog.config.settings import Settings


def config_path(arg: str | None) -> str | None:
    """``--config``, else ``/etc/inference-watchdog/config.yaml`` when it exists, else None (defaults)."""
    from watchdog.config.loader import DEFAULT_CONFIG_PATH

    return arg or (str(DEFAULT_CONFIG_PATH) if DEFAULT_CONFIG_PATH.exists() else None)


def load_node_settings(arg: str | None) -> Settings:
    """The settings ``run`` would use (see :func:`config_path`); raises ConfigError."""
    from watchdog.config import load_settings

    return load_settings(config_path(arg))


def checked_settings(path: str | None, *, daemon: bool) -> tuple[Settings | None, list[str]]:
    """The settings of ``path`` (None: the defaults), or None and the lines ``config check`` prints for
    what is wrong with it: every problem at once (``file:line: key.path: problem``, with did-you-mean),
    then a count. ``daemon`` adds the start-up checks of ``run`` (the listen address binds, the state
    directory, the rule files load), which a one-shot command beside a running daemon must not make."""
    from watchdog.config import ConfigError, load_settings
    from watchdog.config.lint import config_problems
    from watchdog.daemon.preflight import preflight

    if path is not None:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            return None, [f"error: {path}: cannot read: {exc.strerror}"]
        problems = config_problems(text, path)
        if problems:
            return None, [*(f"error: {problem}" for problem in problems), f"{path}: {len(problems)} problem(s)"]
    try:
        settings = load_settings(path)
        if daemon:
            preflight(settings, path or "<defaults>")
    except ConfigError as exc:
        return None, [f"error: {exc}"]
    return settings, []
