"""Every engine fixture yields the expected canonical values through rules/engines.yaml.

Two paths: the agent's own (collector parsing + target labels + config series, stored, rules evaluated
by our rule engine) and the ``query --metrics-file`` command line. Expected values come from
tests/fixtures/engines/expected.yaml, written by the fixture generator from the values it put in.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
import yaml

from tests.support.engine_signals import FIXTURES, ROOT, RULES, canonical, query
from tests.support.engine_signals import agent_store as _agent_store
from watchdog.store import Store

EXPECTED: dict[str, Any] = yaml.safe_load((FIXTURES / "expected.yaml").read_text(encoding="utf-8"))


def agent_store(*names: str) -> Store:
    """The rendered fixtures *names* as the agent stores them after one scrape."""
    return _agent_store(*(FIXTURES / name for name in names))


@pytest.mark.parametrize("fixture", sorted(EXPECTED), ids=str)
def test_canonical_values_of_every_fixture(fixture: str) -> None:
    store = agent_store(fixture)
    got = canonical(store)
    for entry in EXPECTED[fixture]["series"]:
        matches = [v for name, labels, v in got if name == entry["series"] and labels == entry["labels"]]
        assert matches == [entry["value"]], (entry, [g for g in got if g[0] == entry["series"]])
    # nothing else: every canonical sample is expected (no double counting of old and new names)
    expected_keys = {(e["series"], json.dumps(e["labels"], sort_keys=True))
                     for e in EXPECTED[fixture]["series"]}
    got_keys = {(name, json.dumps(labels, sort_keys=True)) for name, labels, _ in got}
    assert got_keys == expected_keys


def test_router_series_never_become_engine_signals() -> None:
    assert canonical(agent_store("vllm-router.txt")) == []
    alone = sorted(canonical(agent_store("vllm-0.12.txt")), key=repr)
    together = sorted(canonical(agent_store("vllm-0.12.txt", "vllm-router.txt")), key=repr)
    assert together == alone


@pytest.mark.parametrize("fixture", sorted(f for f in EXPECTED if "capacity" in EXPECTED[f]), ids=str)
def test_kv_capacity_in_tokens(fixture: str) -> None:
    capacity = EXPECTED[fixture]["capacity"]
    want = capacity.get("tokens") or capacity["blocks"] * capacity["block_size"]
    values = list(query(agent_store(fixture), "engine:kv_cache_capacity_tokens:sum").values())
    assert values == [float(want)]


def test_headroom_falls_back_to_free_kv_on_a_single_scrape() -> None:
    # one scrape has no rates: B_max is unknown, so the headroom is 1 - KV usage
    store = agent_store("vllm-0.11.txt")
    (kv,) = [e["value"] for e in EXPECTED["vllm-0.11.txt"]["series"]
             if e["series"] == "engine:kv_cache_usage_ratio"]
    (headroom,) = query(store, "engine:capacity_headroom_ratio").values()
    assert math.isclose(headroom, 1 - kv)


@pytest.mark.parametrize("fixture", sorted(f for f in EXPECTED if EXPECTED[f]["series"]), ids=str)
def test_query_command_on_fixture_files(fixture: str) -> None:
    """``inference-watchdog query --metrics-file F --rules rules/engines.yaml EXPR --json``."""
    out = subprocess.run(
        [sys.executable, "-m", "watchdog", "query", "--metrics-file", str(FIXTURES / fixture),
         "--rules", str(RULES), "--json", "engine:kv_cache_usage_ratio"],
        capture_output=True, text=True, cwd=ROOT, check=False, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["status"] == "success"
    got = {json.dumps({k: v for k, v in r["metric"].items() if k != "__name__"}, sort_keys=True):
           float(r["value"][1]) for r in document["data"]["result"]}
    want = {json.dumps(e["labels"], sort_keys=True): e["value"]
            for e in EXPECTED[fixture]["series"] if e["series"] == "engine:kv_cache_usage_ratio"}
    assert got == want
