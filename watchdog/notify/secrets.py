"""Moved to :mod:`watchdog.secrets`; this name stays only until watchdog/exporter/security.py imports it there."""

from watchdog.secrets import SecretError, read_secret

__all__ = ["SecretError", "read_secret"]
