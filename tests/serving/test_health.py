"""The HTTP health and list answers (watchdog/serving/health.py) for every verdict and source state."""

from __future__ import annotations

import json

import pytest

from tests.support.verdicts import SettableVerdicts
from watchdog.serving.health import handles, respond
from watchdog.serving.model import Reason, Verdict


def body(answer_body: bytes) -> dict:  # type: ignore[type-arg]
    return json.loads(answer_body)


@pytest.mark.parametrize(("verdict", "code"), [
    (Verdict.ADMIT, 200), (Verdict.SHORT_ONLY, 200), (Verdict.SHED, 429), (Verdict.DRAIN, 503),
    (Verdict.DOWN, 503), (Verdict.UNKNOWN, 200),
])
def test_each_verdict_has_its_status_code_and_says_itself(verdict: Verdict, code: int) -> None:
    source = SettableVerdicts(["vllm-a", "vllm-b"])
    source.set("vllm-a", verdict, reasons=(Reason("kv_free_low", "free KV 3 % < 5 %"),))
    answer = respond(source, "/api/v1/engines/vllm-a/health")
    assert answer.code == code
    document = body(answer.body)
    assert document["job"] == "vllm-a"
    assert document["verdict"] == verdict.value
    assert document["trusted"] is True
    assert document["reasons"] == [{"code": "kv_free_low", "detail": "free KV 3 % < 5 %"}]
    # The other engine is untouched.
    assert respond(source, "/api/v1/engines/vllm-b/health").code == 200


def test_short_only_body_carries_the_weight() -> None:
    source = SettableVerdicts(["vllm-a"])
    source.set("vllm-a", Verdict.SHORT_ONLY, weight_percent=40)
    assert body(respond(source, "/api/v1/engines/vllm-a/health").body)["weight_percent"] == 40


@pytest.mark.parametrize("verdict", [Verdict.SHED, Verdict.DRAIN, Verdict.DOWN])
def test_an_untrusted_agent_fails_open(verdict: Verdict) -> None:
    source = SettableVerdicts(["vllm-a"])
    source.set("vllm-a", verdict)
    source.set_trusted(False)
    answer = respond(source, "/api/v1/engines/vllm-a/health")
    assert answer.code == 200
    document = body(answer.body)
    assert document["verdict"] == "unknown"
    assert document["held"] == verdict.value
    assert document["trusted"] is False
    assert document["reasons"][0]["code"] == "agent_unhealthy"


def test_no_source_yet_fails_open_for_health_and_is_unavailable_for_the_list() -> None:
    answer = respond(None, "/api/v1/engines/anything/health")
    assert answer.code == 200
    assert body(answer.body)["verdict"] == "unknown"
    listing = respond(None, "/api/v1/engines")
    assert listing.code == 503
    assert body(listing.body)["errorType"] == "unavailable"


def test_unknown_job_is_404_and_bad_paths_are_404() -> None:
    source = SettableVerdicts(["vllm-a"])
    assert respond(source, "/api/v1/engines/vllm-typo/health").code == 404
    assert "vllm-typo" in body(respond(source, "/api/v1/engines/vllm-typo/health").body)["error"]
    for path in ("/api/v1/engines/", "/api/v1/engines/health", "/api/v1/engines/vllm-a",
                 "/api/v1/engines/a/b/health", "/api/v1/engines//health"):
        assert respond(source, path).code == 404, path


def test_job_names_are_url_decoded() -> None:
    source = SettableVerdicts(["vllm a"])
    source.set("vllm a", Verdict.DRAIN)
    assert respond(source, "/api/v1/engines/vllm%20a/health").code == 503


def test_list_is_the_shared_json_view() -> None:
    source = SettableVerdicts(["vllm-b", "vllm-a"])
    source.set("vllm-b", Verdict.SHED)
    answer = respond(source, "/api/v1/engines")
    assert answer.code == 200
    document = body(answer.body)
    assert document["status"] == "success"
    assert document["data"]["trusted"] is True
    assert [(e["job"], e["verdict"]) for e in document["data"]["engines"]] == [("vllm-a", "admit"), ("vllm-b", "shed")]
    assert set(document["data"]["engines"][0]["scores"]) >= {"kv_free_ratio", "predicted_wait_seconds"}


def test_handles_only_its_paths() -> None:
    assert handles("/api/v1/engines") and handles("/api/v1/engines/x/health")
    assert not handles("/api/v1/enginesx") and not handles("/api/v1/query")


class NoVerdictsYet:
    """A source before the agent's first tick: no verdicts, not trusted."""

    def verdicts(self) -> list:  # type: ignore[type-arg]
        return []

    def verdict(self, job: str) -> None:
        return None

    def trusted(self) -> bool:
        return False


def test_before_the_first_tick_every_job_fails_open_not_404() -> None:
    answer = respond(NoVerdictsYet(), "/api/v1/engines/vllm-a/health")
    assert answer.code == 200
    assert body(answer.body)["verdict"] == "unknown"
    listing = respond(NoVerdictsYet(), "/api/v1/engines")
    assert listing.code == 200
    assert body(listing.body)["data"] == {"trusted": False, "engines": []}
