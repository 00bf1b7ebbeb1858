"""The HTTP answers balancers and gateways read: the list of every engine's verdict and one engine's
health check. Pure: the exporter (``watchdog/exporter/server.py``) serves them behind its TLS and auth.

Paths (documented in ``docs/routing.md``):

- ``GET /api/v1/engines``: :func:`watchdog.serving.jsonview.verdicts_json` (every engine, its verdict,
  weight, reasons and routing scores), 200. While the agent has no verdict source yet (starting up)
  503 with Prometheus' error envelope, ``errorType`` ``unavailable``: a gateway must not read an empty
  list as "no engine may serve".
- ``GET /api/v1/engines/<job>/health``: one engine, for HAProxy ``option httpchk``, Envoy and nginx
  health checks and a Kubernetes readiness probe. The status code is the decision:

  ========================  ====  ====================================================================
  verdict                   code  why
  ========================  ====  ====================================================================
  ``admit``                 200   serve anything
  ``short-only``            200   still serves (the body says short prompts only; a balancer that cannot
                                  route by prompt length keeps sending, at the weight the body gives)
  ``shed``                  429   take no new request now; it recovers by itself
  ``drain``, ``down``       503   out of rotation
  ``unknown``               200   no fresh data, agent unhealthy or not started: fail open (a health
                                  check that failed here would take capacity away on no evidence)
  ========================  ====  ====================================================================

  An engine the agent does not know is 404 (a typo in a balancer's config must be seen, not passed);
  before the agent has a verdict source, or before its first tick computed any verdict, every job is 200
  ``unknown`` (it cannot know the jobs yet, and failing would drain the whole fleet at every agent
  restart).

Contract: :func:`respond` never raises for any path or source state; bodies are small JSON objects
``{"job", "verdict", "weight_percent", "reasons": [{"code", "detail"}], "since", "trusted"}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from watchdog.serving.jsonview import verdicts_json
from watchdog.serving.model import EngineVerdict, Verdict, VerdictSource

LIST_PATH = "/api/v1/engines"
HEALTH_SUFFIX = "/health"

STATUS_OF: dict[Verdict, int] = {
    Verdict.ADMIT: 200, Verdict.SHORT_ONLY: 200, Verdict.SHED: 429,
    Verdict.DRAIN: 503, Verdict.DOWN: 503, Verdict.UNKNOWN: 200,
}
"""The HTTP status of each verdict on the health endpoint."""

NOT_READY_REASON = {"code": "agent_unhealthy", "detail": "the agent has no verdicts yet (starting)"}
UNTRUSTED_REASON = {"code": "agent_unhealthy", "detail": "the agent is unhealthy: failing open"}


@dataclass(frozen=True)
class HealthResponse:
    """What the exporter sends: status code and JSON body."""

    code: int
    body: bytes
    content_type: str = "application/json"


def handles(path: str) -> bool:
    """True for the paths :func:`respond` answers (the list and every ``/api/v1/engines/...``)."""
    return path == LIST_PATH or path.startswith(LIST_PATH + "/")


def respond(source: VerdictSource | None, path: str) -> HealthResponse:
    """The answer to ``GET path`` (one that :func:`handles`) given the agent's current source (None while
    the agent has none)."""
    if path == LIST_PATH:
        if source is None:
            return _json(503, {"status": "error", "errorType": "unavailable",
                               "error": "the agent has no serving verdicts yet (starting up)"})
        return _json(200, verdicts_json(source))
    rest = path[len(LIST_PATH) + 1:]
    if not rest.endswith(HEALTH_SUFFIX) or "/" in rest[:-len(HEALTH_SUFFIX)] or rest == HEALTH_SUFFIX[1:]:
        return HealthResponse(404, b"404 page not found\n", "text/plain")
    job = unquote(rest[:-len(HEALTH_SUFFIX)])
    if not job:
        return HealthResponse(404, b"404 page not found\n", "text/plain")
    return health(source, job)


def health(source: VerdictSource | None, job: str) -> HealthResponse:
    """One engine's health answer (see the module docstring for the codes)."""
    if source is None:
        return _json(200, {"job": job, "verdict": Verdict.UNKNOWN.value, "weight_percent": None,
                           "reasons": [NOT_READY_REASON], "since": None, "trusted": False})
    verdict = source.verdict(job)
    if verdict is None and not source.verdicts():  # no tick has computed verdicts yet: it cannot tell
        return _json(200, {"job": job, "verdict": Verdict.UNKNOWN.value, "weight_percent": None,
                           "reasons": [NOT_READY_REASON], "since": None, "trusted": False})
    if verdict is None:
        return _json(404, {"job": job, "error": f"no engine with job {job!r} is configured on this agent"})
    trusted = source.trusted()
    if not trusted:
        return _json(200, {**_body(verdict, trusted), "verdict": Verdict.UNKNOWN.value,
                           "held": verdict.verdict.value, "reasons": [UNTRUSTED_REASON]})
    return _json(STATUS_OF[verdict.verdict], _body(verdict, trusted))


def _body(verdict: EngineVerdict, trusted: bool) -> dict[str, Any]:
    return {"job": verdict.job, "verdict": verdict.verdict.value, "weight_percent": verdict.weight_percent,
            "reasons": [{"code": r.code, "detail": r.detail} for r in verdict.reasons],
            "since": verdict.since_seconds, "trusted": trusted}


def _json(code: int, document: Any) -> HealthResponse:
    return HealthResponse(code, json.dumps(document, separators=(",", ":")).encode("utf-8") + b"\n")
