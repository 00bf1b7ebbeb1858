"""TLS and basic auth of the exporter, built from the ``exporter`` config section.

Contract:
- :func:`load_security` reads certificates, keys and the password *now* (start and SIGHUP) and raises
  :class:`ExporterConfigError` naming the key path and file, never a secret; it builds everything before
  returning, so a failed reload leaves the running settings untouched.
- The password is registered with :func:`watchdog.logs.register_secret` the moment it is read, and only a
  salted PBKDF2 digest of it is kept. :meth:`BasicAuth.check` compares in constant time; successful
  credentials are remembered (as a keyed digest) so a scrape every few seconds does not pay the KDF.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from watchdog.config.settings import BasicAuthSettings, ExporterSettings, TlsSettings
from watchdog.infra.secrets import SecretError, read_secret

PBKDF2_ITERATIONS = 50_000
_VERIFIED_CACHE_SIZE = 8
_TLS_VERSIONS = {"TLS1.2": ssl.TLSVersion.TLSv1_2, "TLS1.3": ssl.TLSVersion.TLSv1_3}


class AuthCheck(Protocol):
    """Verifies an HTTP ``Authorization`` header."""

    def check(self, header: str | None) -> bool:
        """True when the header carries valid credentials."""
        ...


class ExporterConfigError(ValueError):
    """An ``exporter`` section problem: the key path and what is wrong (files named, secrets never)."""


def _derive(password: str, salt: bytes) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, PBKDF2_ITERATIONS)


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
class HashBudget:
    """A token bucket for password derivations: ``rate`` per second, at most ``burst`` at once. A flood
    of wrong passwords is refused before the expensive hash instead of burning the agent's CPU; the
    right password is unaffected once verified (cached), and a new one waits a second at most."""

    def __init__(self, rate: float = 10.0, burst: float = 20.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens, self._at = burst, clock()
        self._lock = threading.Lock()
        self.refused = 0

    def take(self) -> bool:
        """True (and one token spent) when a derivation may run now."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens < 1:
                self.refused += 1
                return False
            self._tokens -= 1
            return True


@dataclass
class BasicAuth:
    """One username and a salted password digest; :meth:`check` verifies an ``Authorization`` header."""

    username: str
    salt: bytes
    digest: bytes
    _cache: VerifiedCache = field(default_factory=VerifiedCache, repr=False)
    budget: HashBudget = field(default_factory=HashBudget, repr=False)

    @classmethod
    def from_password(cls, username: str, password: str) -> BasicAuth:
        """Keep only a PBKDF2-SHA256 digest of ``password`` with a fresh random salt."""
        salt = os.urandom(16)
        return cls(username=username, salt=salt, digest=_derive(password, salt))

    def check(self, header: str | None) -> bool:
        """True when ``header`` is ``Basic base64(user:password)`` with the right user and password."""
        return check_basic(header, self._cache, self._verify)

    def _verify(self, user: str, password: str) -> bool:
        if not self.budget.take():  # a flood of wrong passwords does not burn the CPU
            return False
        user_ok = hmac.compare_digest(user.encode("utf-8"), self.username.encode("utf-8"))
        password_ok = hmac.compare_digest(_derive(password, self.salt), self.digest)
        return user_ok and password_ok


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


def load_basic_auth(section: BasicAuthSettings, environ: Mapping[str, str] | None = None) -> BasicAuth | None:
    """Basic auth from ``exporter.basic_auth``, or None when no username is configured."""
    username = section.username
    env_name = section.password_env
    file_path = section.password_file
    if not username:
        if env_name or file_path:
            raise ExporterConfigError("exporter.basic_auth.username: required when a password is configured")
        return None
    if ":" in username:
        raise ExporterConfigError("exporter.basic_auth.username: must not contain ':'")
    if not env_name and not file_path:
        raise ExporterConfigError("exporter.basic_auth: set password_env or password_file")
    try:
        password = read_secret(env_name, file_path, environ)
    except SecretError as exc:
        raise ExporterConfigError(f"exporter.basic_auth.password_file: {exc}") from None
    if not password:
        where = f"file {file_path}" if file_path else f"environment variable {env_name}"
        raise ExporterConfigError(f"exporter.basic_auth: the password ({where}) is empty or unset")
    return BasicAuth.from_password(username, password)


def load_security(section: ExporterSettings, environ: Mapping[str, str] | None = None) -> ExporterSecurity:
    """TLS and basic auth from the ``exporter`` settings (all-or-nothing), or from an exporter-toolkit
    web-config file (``exporter.web_config_file``, exclusive with ``tls``/``basic_auth``)."""
    if section.web_config_file:
        if section.tls.cert_file or section.basic_auth.username:
            raise ExporterConfigError("exporter.web_config_file: set either it or exporter.tls/basic_auth, not both")
        from watchdog.exporter.webconfig import load_web_config

        return load_web_config(section.web_config_file)
    return ExporterSecurity(tls=load_tls(section.tls), auth=load_basic_auth(section.basic_auth, environ))
