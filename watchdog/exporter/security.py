"""TLS and basic auth of the exporter, built from the ``exporter`` config section (or, when it names one, from
an exporter-toolkit web-config file: :mod:`watchdog.exporter.webconfig`).

Contract:
- :func:`load_security` reads certificates, keys and the password *now* (start and SIGHUP) and raises
  :class:`ExporterConfigError` naming the key path and file, never a secret; it builds everything before
  returning, so a failed reload leaves the running settings untouched.
- The password is registered with :func:`watchdog.logs.register_secret` the moment it is read, and only a
  salted PBKDF2 digest of it is kept. :meth:`BasicAuth.check` compares in constant time; successful
  credentials are remembered (as a keyed digest) so a scrape every few seconds does not pay the KDF.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from watchdog.config.settings import BasicAuthSettings, ExporterSettings
from watchdog.exporter.access import ExporterConfigError, ExporterSecurity, VerifiedCache, check_basic, load_tls
from watchdog.infra.secrets import SecretError, read_secret

PBKDF2_ITERATIONS = 50_000


def _derive(password: str, salt: bytes) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, PBKDF2_ITERATIONS)


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
        # Imported here: bcrypt costs memory on every host, and only a web-config file needs it.
        from watchdog.exporter.webconfig import load_web_config

        return load_web_config(section.web_config_file)
    return ExporterSecurity(tls=load_tls(section.tls), auth=load_basic_auth(section.basic_auth, environ))
