"""Secrets (notifier tokens, runbook secret_vars, exporter credentials): read from an environment variable
or a file named in the config, never from the YAML itself, and registered with
:func:`watchdog.logs.register_secret` the moment they are read."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from watchdog.infra.logs import register_secret

log = logging.getLogger("watchdog.notify")  # the name its log lines have always had


class SecretError(Exception):
    """A secret could not be read; the message names the variable or file, never the value."""


def read_secret(
    env_name: str = "", file_path: str = "", environ: Mapping[str, str] | None = None
) -> str | None:
    """The secret from ``file_path`` (whitespace stripped) if given, else from ``env_name``; None if unset.

    The value is registered for redaction before it is returned. A file readable by others is used but
    logged as a warning.
    """
    env = os.environ if environ is None else environ
    if file_path:
        path = Path(file_path)
        try:
            value = path.read_text(encoding="utf-8").strip()
            mode = path.stat().st_mode
        except OSError as exc:
            raise SecretError(f"cannot read secret file {file_path}: {exc.strerror}") from None
        register_secret(value)
        if mode & (stat.S_IRGRP | stat.S_IROTH):
            log.warning("secret file is readable by group or others", extra={"file": file_path})
        return value or None
    if env_name:
        value = env.get(env_name, "").strip()
        register_secret(value)
        return value or None
    return None
