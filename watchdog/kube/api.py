"""The agent's own Node through the Kubernetes API server: read it, set a condition, replace its taints.

Plain HTTPS with the standard library (three requests do not earn a client library and its dependency
tree). In a pod: the API server from ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``, the
service-account token and CA from :data:`SERVICE_ACCOUNT_DIR`.

Contract:
- A :class:`NodeApi` is bound to one node name at construction; every call names the node it means and
  one that is not that node raises :class:`ForeignNodeRefused` before anything is sent.
- The token is read from its file on every request (kubelet rotates projected tokens) and never appears
  in an exception, a log line or an audit row.
- Requests, exactly: ``GET /api/v1/nodes/NAME``; ``PATCH /api/v1/nodes/NAME/status`` with
  ``application/strategic-merge-patch+json`` (conditions merge by ``type``, so other conditions are
  untouched); ``PATCH /api/v1/nodes/NAME`` with ``application/json-patch+json``, a ``test`` of
  ``/metadata/resourceVersion`` and an ``add`` of ``/spec/taints`` (taints have no merge key, so the whole
  list is written, and the test makes a concurrent change fail instead of being overwritten).
- Any non-2xx answer or transport failure raises :class:`KubeApiError` (status 0 for transport).
"""

from __future__ import annotations

import json
import os
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_ERROR_BODY = 300
# A Node name is a DNS subdomain (RFC 1123): what the API server accepts, so nothing else reaches a URL.
NODE_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class KubeApiError(Exception):
    """A request that failed; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}" if status else message)


class ForeignNodeRefused(ValueError):
    """A request about a node other than the agent's own (never sent)."""


class NotInCluster(RuntimeError):
    """No API server to talk to: not in a pod, or its service account is not mounted."""


@dataclass(frozen=True)
class ApiEndpoint:
    """Where the API server is and how to authenticate: ``ca_file`` None means plain HTTP (tests only)."""

    base_url: str
    token_file: str
    ca_file: str | None


def in_cluster_endpoint(environ: Mapping[str, str] = os.environ,
                        account_dir: Path = SERVICE_ACCOUNT_DIR) -> ApiEndpoint:
    """The API server as seen from a pod; raises :class:`NotInCluster` naming what is missing."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise NotInCluster("KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set: not running in a pod")
    token, ca = account_dir / "token", account_dir / "ca.crt"
    for needed in (token, ca):
        if not needed.is_file():
            raise NotInCluster(f"{needed} is missing: the pod has no service-account token mounted")
    host = f"[{host}]" if ":" in host else host
    return ApiEndpoint(f"https://{host}:{port}", str(token), str(ca))


def valid_node_name(name: str) -> bool:
    """Whether ``name`` is a possible Node name (DNS subdomain, at most 253 characters)."""
    return len(name) <= 253 and NODE_NAME_RE.fullmatch(name) is not None


class NodeApi:
    """Reads and patches one Node, the agent's own (``node_name``), and no other."""

    def __init__(self, endpoint: ApiEndpoint, node_name: str, *, timeout: float = 10.0) -> None:
        if not valid_node_name(node_name):
            raise ValueError(f"not a Kubernetes node name: {node_name[:80]!r}")
        self.endpoint = endpoint
        self.node_name = node_name
        self.timeout = timeout
        self._context = ssl.create_default_context(cafile=endpoint.ca_file) if endpoint.ca_file else None

    def get_node(self, node: str) -> dict[str, Any]:
        """The Node object."""
        return self._request("GET", self._path(node), None, "")

    def set_condition(self, node: str, cond: Mapping[str, str]) -> dict[str, Any]:
        """Set one condition in ``status.conditions`` (strategic merge by ``type``)."""
        return self._request("PATCH", self._path(node) + "/status", {"status": {"conditions": [dict(cond)]}},
                             "application/strategic-merge-patch+json")

    def replace_taints(self, node: str, resource_version: str, taints: list[dict[str, str]]) -> dict[str, Any]:
        """Write ``spec.taints`` if the Node is still at ``resource_version`` (JSON patch with a test)."""
        ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
               {"op": "add", "path": "/spec/taints", "value": taints}]
        return self._request("PATCH", self._path(node), ops, "application/json-patch+json")

    def _path(self, node: str) -> str:
        if node != self.node_name:
            raise ForeignNodeRefused(f"refused: node {node[:80]!r} is not this agent's node {self.node_name!r}")
        return f"/api/v1/nodes/{quote(node, safe='')}"

    def _request(self, method: str, path: str, body: Any, content_type: str) -> dict[str, Any]:
        try:
            token = Path(self.endpoint.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise KubeApiError(0, f"cannot read the service-account token: {exc.strerror}") from None
        headers = {"Accept": "application/json", "Authorization": f"Bearer {token}",
                   "User-Agent": "inference-watchdog"}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.endpoint.base_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._context) as response:
                answer = response.read()
        except urllib.error.HTTPError as exc:
            text = exc.read(MAX_ERROR_BODY * 4).decode("utf-8", "replace")
            raise KubeApiError(exc.code, f"{method} {path}: {_status_message(text)}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise KubeApiError(0, f"{method} {path}: {reason}") from None
        try:
            parsed = json.loads(answer)
        except ValueError:
            raise KubeApiError(0, f"{method} {path}: the answer is not JSON") from None
        if not isinstance(parsed, dict):
            raise KubeApiError(0, f"{method} {path}: the answer is not a JSON object")
        return parsed


def _status_message(text: str) -> str:
    """The ``message`` of a Kubernetes ``Status`` answer, else the start of the body."""
    try:
        message = json.loads(text).get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or text)[:MAX_ERROR_BODY]
