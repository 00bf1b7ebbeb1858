"""Logging: structured lines (JSON when stdout is not a terminal) with secrets redacted.

Contract: every secret the agent loads is passed to :func:`register_secret` before it is used; from then
on no log record, exception text or notification rendered through :func:`redact` contains it.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any

_secrets: set[str] = set()
_secrets_lock = threading.Lock()
REDACTED = "<redacted>"

# Attributes every LogRecord has; anything else passed via ``extra=`` is a structured field.
_STANDARD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def register_secret(value: str | None) -> None:
    """Remember a secret (token, webhook URL, password) so that it is redacted everywhere."""
    if value and len(value) >= 4:
        with _secrets_lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``<redacted>``."""
    with _secrets_lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD_ATTRS and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, structured fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        payload.update(_fields(record))
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(payload, default=str, sort_keys=False))


class TextFormatter(logging.Formatter):
    """Human form for terminals: ``time level logger msg key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(record.created))
        extra = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        line = f"{when} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if extra:
            line += "  " + extra
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


def setup_logging(level: str = "info", json_lines: bool | None = None, stream: Any = None) -> None:
    """Configure the root logger once; JSON lines unless ``stream`` is a terminal."""
    stream = stream or sys.stderr
    if json_lines is None:
        json_lines = not (hasattr(stream, "isatty") and stream.isatty())
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("urllib3", "slack_sdk"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
