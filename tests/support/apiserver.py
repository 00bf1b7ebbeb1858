"""A loopback server that answers like the Kubernetes API server for the Node requests the agent makes.

It holds real Node objects and applies what it is sent the way the API server does: ``GET
/api/v1/nodes/NAME``; ``PATCH /api/v1/nodes/NAME/status`` with a strategic-merge patch (``conditions``
merged by ``type``, other status fields kept); ``PATCH /api/v1/nodes/NAME`` with a JSON patch (RFC 6902
``test``/``add``/``replace``/``remove`` on ``/metadata/...`` and ``/spec/...``; a failed ``test`` answers
422 like the API server). Every write bumps ``metadata.resourceVersion``. Unknown nodes answer 404 with a
``Status`` object, a missing or wrong bearer token 401, another content type 415. Every request is
recorded (method, path, content type, authorization, parsed body) for the tests to assert on.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any


@dataclass(frozen=True)
class Seen:
    """One request the fake API server received."""

    method: str
    path: str
    content_type: str
    authorization: str
    body: Any


class FakeApiServer:
    """Node objects by name, the requests seen, and the token it accepts."""

    def __init__(self, token: str, nodes: dict[str, dict[str, Any]]) -> None:
        self.token = token
        self.nodes = nodes
        self.seen: list[Seen] = []
        self.fail_next: list[int] = []  # statuses to answer the next requests with (a broken API server)
        self.lock = threading.Lock()

    def writes(self) -> list[Seen]:
        """The PATCH requests seen, in order."""
        return [s for s in self.seen if s.method == "PATCH"]

    def handle(self, method: str, path: str, headers: Any, raw: bytes) -> tuple[int, Any]:
        content_type = headers.get("Content-Type", "")
        authorization = headers.get("Authorization", "")
        body = json.loads(raw) if raw else None
        with self.lock:
            self.seen.append(Seen(method, path, content_type, authorization, body))
            if self.fail_next:
                code = self.fail_next.pop(0)
                return code, status(code, "injected failure")
            if authorization != f"Bearer {self.token}":
                return 401, status(401, "Unauthorized")
            parts = path.split("/")
            if parts[:4] != ["", "api", "v1", "nodes"] or len(parts) not in (5, 6):
                return 404, status(404, f"no route {path}")
            node = self.nodes.get(parts[4])
            if node is None:
                return 404, status(404, f'nodes "{parts[4]}" not found')
            subresource = parts[5] if len(parts) == 6 else ""
            if method == "GET" and not subresource:
                return 200, node
            if method == "PATCH" and subresource == "status":
                if content_type != "application/strategic-merge-patch+json":
                    return 415, status(415, f"unsupported patch type {content_type}")
                merge_status(node, body)
            elif method == "PATCH" and not subresource:
                if content_type != "application/json-patch+json":
                    return 415, status(415, f"unsupported patch type {content_type}")
                failure = json_patch(node, body)
                if failure:
                    return 422, status(422, failure)
            else:
                return 405, status(405, f"{method} {path}")
            node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
            return 200, node


def status(code: int, message: str) -> dict[str, Any]:
    """A Kubernetes ``Status`` object."""
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}


def merge_status(node: dict[str, Any], patch: dict[str, Any]) -> None:
    """Strategic merge of a ``{"status": {"conditions": [...]}}`` patch: conditions merge by ``type``."""
    conditions = node.setdefault("status", {}).setdefault("conditions", [])
    for cond in patch["status"].get("conditions", []):
        existing = next((c for c in conditions if c["type"] == cond["type"]), None)
        if existing is None:
            conditions.append(dict(cond))
        else:
            existing.update(cond)


def json_patch(node: dict[str, Any], ops: list[dict[str, Any]]) -> str:
    """Apply RFC 6902 operations (paths two levels deep); returns the failure, "" when applied."""
    draft = json.loads(json.dumps(node))
    for op in ops:
        _, section, key = op["path"].split("/")
        target = draft.setdefault(section, {})
        if op["op"] == "test":
            if target.get(key) != op["value"]:
                return f"the server rejected our request: testing value {op['path']} failed"
        elif op["op"] in ("add", "replace"):
            if op["op"] == "replace" and key not in target:
                return f"replace operation does not apply: doc is missing path: {op['path']}"
            target[key] = op["value"]
        elif op["op"] == "remove":
            target.pop(key, None)
        else:
            return f"unknown op {op['op']}"
    node.clear()
    node.update(draft)
    return ""


def make_node(name: str, *, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A Node as the API server returns it, with the kubelet's own conditions."""
    node: dict[str, Any] = {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "resourceVersion": "1000", "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
             "lastHeartbeatTime": "2026-12-06T00:00:00Z", "lastTransitionTime": "2026-12-01T00:00:00Z"},
        ]},
    }
    if taints is not None:
        node["spec"]["taints"] = taints
    return node


@contextmanager
def serving(api: FakeApiServer, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """Serve ``api`` on 127.0.0.1 (ephemeral port), over TLS when ``tls`` is given; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            code, body = api.handle(self.command, self.path, self.headers, self.rfile.read(length))
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    scheme = "https" if tls else "http"
    try:
        yield f"{scheme}://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
