"""What the exporter enforces, whichever config form built it: the types both forms share.

Contract: :class:`ExporterSecurity` is an SSL context (None: plain HTTP) and an :class:`AuthCheck` (None:
open); :class:`ExporterConfigError` names the key path and file, never a secret. :func:`load_tls` builds the
server context from a :class:`TlsSettings`; :func:`check_basic` verifies a ``Basic`` header through a
caller's verifier and remembers what passed (:class:`VerifiedCache`, keyed digests only). The ``exporter``
section form is :mod:`watchdog.exporter.security`; exporter-toolkit's web-config file form is
:mod:`watchdog.exporter.webconfig`; neither imports the other's types from the other.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from watchdog.config.settings import TlsSettings

_VERIFIED_CACHE_SIZE = 8
_TLS_VERSIONS = {"TLS1.2": ssl.TLSVersion.TLSv1_2, "TLS1.3": ssl.TLSVersion.TLSv1_3}


class AuthCheck(Protocol):
    """Verifies an HTTP ``Authorization`` header."""

    def check(self, header: str | None) -> bool:
        """True when the header carries valid credentials."""
        ...


class ExporterConfigError(ValueError):
    """An ``exporter`` section problem: the key path and what is wrong (files named, secrets never)."""


class VerifiedCache:
    """Credentials that passed, remembered as keyed digests (at most a few), so a scrape every few seconds
    does not pay the password KDF again. Thread-safe."""

    def __init__(self) -> None:
        self._key = os.urandom(16)
        self._verified: dict[bytes, None] = {}
        self._lock = threading.Lock()

    def _digest(self, token: bytes) -> bytes:
        return hmac.new(self._key, token, hashlib.sha256).digest()

    def __contains__(self, token: bytes) -> bool:
        with self._lock:
            return self._digest(token) in self._verified

    def add(self, token: bytes) -> None:
        """Remember ``token`` (the base64 part of the header) as verified."""
        with self._lock:
            if len(self._verified) >= _VERIFIED_CACHE_SIZE:
                self._verified.pop(next(iter(self._verified)))
            self._verified[self._digest(token)] = None


def basic_credentials(header: str | None) -> tuple[bytes, str, str] | None:
    """``(token, user, password)`` of a ``Basic`` ``Authorization`` header; None when absent or malformed."""
    if not header or not header.startswith("Basic "):
        return None
    token = header[len("Basic "):].strip().encode("ascii", "replace")
    try:
        decoded = base64.b64decode(token, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (token, user, password) if sep else None


def check_basic(header: str | None, cache: VerifiedCache, verify: Callable[[str, str], bool]) -> bool:
    """True when ``header`` carries credentials ``verify(user, password)`` accepts (remembered in ``cache``)."""
    credentials = basic_credentials(header)
    if credentials is None:
        return False
    token, user, password = credentials
    if token in cache:
        return True
    if not verify(user, password):
        return False
    cache.add(token)
    return True


@dataclass(frozen=True)
class ExporterSecurity:
    """What the server enforces: an SSL context (None = plain HTTP) and basic auth (None = open); ``auth``
    is anything with ``check(header) -> bool`` (:class:`BasicAuth`, or web-config's bcrypt users)."""

    tls: ssl.SSLContext | None = None
    auth: AuthCheck | None = None

    @property
    def scheme(self) -> str:
        """``https`` or ``http``."""
        return "https" if self.tls is not None else "http"


def load_tls(section: TlsSettings) -> ssl.SSLContext | None:
    """A server SSL context from ``exporter.tls``, or None when no certificate is configured."""
    cert = section.cert_file
    key = section.key_file
    if not cert and not key:
        return None
    if not cert or not key:
        missing = "cert_file" if not cert else "key_file"
        raise ExporterConfigError(f"exporter.tls.{missing}: required when the other of cert_file/key_file is set")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _TLS_VERSIONS[section.min_version]
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ExporterConfigError(
            f"exporter.tls: cannot load certificate {cert} with key {key}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    client_ca = section.client_ca_file
    if client_ca:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ExporterConfigError(f"exporter.tls.client_ca_file: cannot load {client_ca}: {exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


