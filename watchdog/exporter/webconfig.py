"""The Prometheus exporter-toolkit ``web-config.yml`` format for the exporter's TLS and basic auth, so fleet
tooling that writes it for node_exporter works unchanged (``exporter.web_config_file``).

Contract: :func:`load_web_config` reads the file *now* (start and SIGHUP) and returns an
:class:`~watchdog.exporter.access.ExporterSecurity`, or raises ``ExporterConfigError`` naming the file
and key (never a hash or a password). Supported: ``tls_server_config`` (``cert_file``, ``key_file``,
``client_ca_file``, ``client_auth_type`` ``NoClientCert``/``RequireAndVerifyClientCert``,
``min_version`` ``TLS12``/``TLS13``) and ``basic_auth_users`` (user: bcrypt hash). Relative paths are
relative to the web-config file, as in exporter-toolkit. Other keys are refused by name (``http_server_config``
and cipher choices are not offered here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from watchdog.config.settings import TlsSettings
from watchdog.exporter.access import ExporterConfigError, ExporterSecurity, VerifiedCache, check_basic, load_tls

TOP_KEYS = {"tls_server_config", "basic_auth_users"}
TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version"}
TLS_VERSIONS = {"TLS12": "TLS1.2", "TLS13": "TLS1.3"}
CLIENT_AUTH = {"NoClientCert", "RequireAndVerifyClientCert"}


@dataclass
class BcryptUsers:
    """``basic_auth_users``: :meth:`check` verifies an ``Authorization`` header against a bcrypt hash;
    verified credentials are remembered (:class:`VerifiedCache`), so a scrape every few seconds skips bcrypt."""

    hashes: dict[str, bytes]
    _cache: VerifiedCache = field(default_factory=VerifiedCache, repr=False)

    def check(self, header: str | None) -> bool:
        """True for ``Basic base64(user:password)`` of a listed user whose password matches its hash."""
        return check_basic(header, self._cache, self._verify)

    def _verify(self, user: str, password: str) -> bool:
        hashed = self.hashes.get(user)
        try:
            return hashed is not None and bcrypt.checkpw(password.encode("utf-8"), hashed)
        except ValueError:  # a malformed hash in the file: no password matches it
            return False


def _tls_section(tls: dict[str, Any], base: Path, file: str) -> TlsSettings:
    unknown = sorted(set(tls) - TLS_KEYS)
    if unknown:
        raise ExporterConfigError(f"{file}: tls_server_config.{unknown[0]}: not supported here "
                                  f"(supported: {', '.join(sorted(TLS_KEYS))})")
    auth_type = str(tls.get("client_auth_type") or "NoClientCert")
    if auth_type not in CLIENT_AUTH:
        raise ExporterConfigError(f"{file}: tls_server_config.client_auth_type: {auth_type!r} is not supported "
                                  f"(use {' or '.join(sorted(CLIENT_AUTH))})")
    version = str(tls.get("min_version") or "TLS12")
    if version not in TLS_VERSIONS:
        raise ExporterConfigError(f"{file}: tls_server_config.min_version: {version!r} is not TLS12 or TLS13")
    if (auth_type == "RequireAndVerifyClientCert") != bool(tls.get("client_ca_file")):
        raise ExporterConfigError(f"{file}: tls_server_config: RequireAndVerifyClientCert and client_ca_file "
                                  "go together")

    def path(key: str) -> str:
        value = str(tls.get(key) or "")
        return str(base / value) if value else ""

    return TlsSettings(cert_file=path("cert_file"), key_file=path("key_file"),
                       client_ca_file=path("client_ca_file"), min_version=TLS_VERSIONS[version])


def load_web_config(file: str) -> ExporterSecurity:
    """TLS and basic auth from an exporter-toolkit web-config file (see the module docstring)."""
    try:
        doc = yaml.safe_load(Path(file).read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ExporterConfigError(f"exporter.web_config_file: cannot read {file}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ExporterConfigError(f"{file}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(doc, dict):
        raise ExporterConfigError(f"{file}: must be a mapping")
    unknown = sorted(set(doc) - TOP_KEYS)
    if unknown:
        raise ExporterConfigError(f"{file}: {unknown[0]}: not supported here "
                                  f"(supported: {', '.join(sorted(TOP_KEYS))})")
    base = Path(file).resolve().parent
    tls = load_tls(_tls_section(dict(doc.get("tls_server_config") or {}), base, file))
    users = doc.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise ExporterConfigError(f"{file}: basic_auth_users: must map user names to bcrypt hashes")
    hashes: dict[str, bytes] = {}
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ExporterConfigError(f"{file}: basic_auth_users.{user}: not a bcrypt hash "
                                      "(htpasswd -nBC 10 \"\" | tr -d ':\\n' makes one)")
        hashes[str(user)] = hashed.replace("$2y$", "$2b$", 1).encode("ascii")
    return ExporterSecurity(tls=tls, auth=BcryptUsers(hashes) if hashes else None)
