"""The engine-neutral ``engine:*`` signals as data, and the renderer of ``rules/engines.yaml``.

Every canonical series is a recording rule whose expression is an ``or`` chain over the names the
engines have used, newest first (docs/engines.md). Rules:

- vLLM terms carry ``{server=""}``: the production-stack router re-exports ``vllm:*`` gauges with a
  ``server`` label, and those must never feed engine signals.
- SGLang terms are wrapped in :func:`sglang_term`, which moves SGLang 0.3's ``name`` label (the model)
  to ``model_name``, so every engine's series carry ``model_name``.
- ``a or b`` keeps ``b`` only where no ``a`` sample has the same labels apart from ``__name__``. When an
  engine exports an old and a new name side by side (vLLM 0.10-0.11) the label sets are equal, so only
  the new name survives and nothing is counted twice. For ``_bucket`` series that is not enough (two
  histograms with different bucket layouts would mix), so fallbacks are added with
  ``unless ignoring(le)``: a fallback histogram is used only where no bucket of the preferred one exists.
- Recording rules drop ``__name__``; all other labels (``job``, ``instance``, ``model_name``, vLLM's
  ``engine`` rank, SGLang's ``tp_rank``/``dp_rank``..., configured target labels) are kept.

``python -m watchdog.engines.canonical > rules/engines.yaml`` renders the file; a test keeps the
checked-in file equal to the rendering.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from watchdog.engines.kv_forecast import forecast_rules

# Labels that SGLang adds per scheduler rank (and `pid`, per tokenizer process); aggregated away where
# series of the scheduler (ranks) and of the tokenizer (no ranks) are combined.
RANK_LABELS = ("engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank", "pid")


def vllm_term(name: str) -> str:
    """A vLLM selector that excludes the production-stack router's ``server``-labelled series."""
    return f'{name}{{server=""}}'


# SGLang 0.3 metric families: they carry the model in a ``name`` label instead of ``model_name``.
SGLANG_03_FAMILIES = frozenset({
    "sglang:num_requests_running", "sglang:num_requests_waiting", "sglang:token_usage",
    "sglang:max_total_num_tokens", "sglang:prompt_tokens_total", "sglang:generation_tokens_total",
    "sglang:time_to_first_token_seconds", "sglang:time_per_output_token_seconds",
    "sglang:e2e_request_latency_seconds", "sglang:waiting_request_latency_seconds",
    "sglang:request_prompt_tokens", "sglang:request_generation_tokens", "sglang:request_success_total",
})


# Labels that split SGLang >= 0.5.2x tokenizer families by request kind, not by engine (seen in a page of
# SGLang 0.5.23's own collectors): prompt/generation tokens, requests, TTFT and E2E by ``is_streaming``,
# cached tokens by ``cache_source``. Summed away so that hits and queries (and sums and counts) match.
SGLANG_SPLIT_LABELS = ("is_streaming", "cache_source")
SGLANG_SPLIT_FAMILIES = frozenset({
    "sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:cached_tokens_total",
    "sglang:num_requests_total", "sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds",
})


def sglang_term(name: str) -> str:
    """An SGLang selector; for families SGLang 0.3 had, its ``name`` label is moved to ``model_name``; for
    families split by request kind (``SGLANG_SPLIT_LABELS``) the split is summed away."""
    family = re.sub(r"_(bucket|sum|count)$", "", name)
    term = name
    if family in SGLANG_03_FAMILIES:
        term = (f'label_replace(label_replace({name}, "model_name", "$1", "name", "(.+)"), '
                f'"name", "", "name", ".*")')
    if family in SGLANG_SPLIT_FAMILIES:
        term = f"sum without ({', '.join(SGLANG_SPLIT_LABELS)}) ({term})"
    return term


def with_label(expr: str, label: str, value: str) -> str:
    """``expr`` with a constant label set on every sample."""
    return f'label_replace({expr}, "{label}", "{value}", "__name__", ".*")'


@dataclass(frozen=True)
class Canonical:
    """One canonical signal: its record name, the source terms in preference order, and its help."""

    record: str
    terms: tuple[str, ...]
    help: str


@dataclass(frozen=True)
class CanonicalHistogram:
    """A canonical histogram: vLLM and SGLang base names in preference order; renders _bucket/_sum/_count."""

    record: str
    vllm: tuple[str, ...]
    sglang: tuple[str, ...]
    help: str


def or_chain(terms: Sequence[str]) -> str:
    """``t1 or t2 or ...`` (plain set union; see the module docstring)."""
    return " or ".join(terms)


def bucket_chain(terms: Sequence[str]) -> str:
    """Union of ``_bucket`` terms where a fallback histogram never mixes its buckets into a preferred one.

    ``t1 or (t2 unless ignoring(le) t1) or (t3 unless ignoring(le) (t1 or t2))``: a fallback series is
    used only where no bucket of an earlier term has the same labels apart from ``le``.
    """
    parts = [terms[0]]
    for i, term in enumerate(terms[1:], start=1):
        parts.append(f"({term} unless ignoring(le) ({' or '.join(terms[:i])}))")
    return " or ".join(parts)


V = vllm_term
S = sglang_term


def _hist(vllm: Sequence[str], sglang: Sequence[str], suffix: str) -> tuple[str, ...]:
    return tuple([V(n + suffix) for n in vllm] + [S(n + suffix) for n in sglang])


CANONICAL: tuple[Canonical | CanonicalHistogram, ...] = (
    Canonical("engine:requests_running",
              (V("vllm:num_requests_running"), S("sglang:num_running_reqs"),
               S("sglang:num_requests_running")),
              "Requests in the running batch."),
    Canonical("engine:requests_waiting",
              (V("vllm:num_requests_waiting"), S("sglang:num_queue_reqs"),
               S("sglang:num_requests_waiting")),
              "Requests waiting to be scheduled."),
    Canonical("engine:kv_cache_usage_ratio",
              (V("vllm:kv_cache_usage_perc"), V("vllm:gpu_cache_usage_perc"), S("sglang:token_usage")),
              "Fraction of the KV cache pool in use, 0..1."),
    Canonical("engine:preemptions_total",
              (V("vllm:num_preemptions_total"), S("sglang:num_retracted_requests_total")),
              "Requests preempted (vLLM) or retracted (SGLang) since start."),
    Canonical("engine:prefix_cache_queries_total",
              (V("vllm:prefix_cache_queries_total"), V("vllm:gpu_prefix_cache_queries_total"),
               S("sglang:prompt_tokens_total")),
              "Prompt tokens looked up in the prefix cache (vLLM < 0.9: blocks)."),
    Canonical("engine:prefix_cache_hits_total",
              (V("vllm:prefix_cache_hits_total"), V("vllm:gpu_prefix_cache_hits_total"),
               S("sglang:cached_tokens_total")),
              "Prompt tokens served from the prefix cache (vLLM < 0.9: blocks)."),
    Canonical("engine:prompt_tokens_total",
              (V("vllm:prompt_tokens_total"), S("sglang:prompt_tokens_total")),
              "Prompt (prefill) tokens processed."),
    Canonical("engine:generation_tokens_total",
              (V("vllm:generation_tokens_total"), S("sglang:generation_tokens_total")),
              "Generated tokens."),
    Canonical("engine:requests_finished_total",
              (V("vllm:request_success_total"), S("sglang:request_success_total"),
               with_label(S("sglang:num_requests_total"), "finished_reason", "unknown"),
               with_label(S("sglang:num_aborted_requests_total"), "finished_reason", "abort")),
              "Finished requests by finished_reason (SGLang >= 0.4: 'unknown' = all finished, 'abort')."),
    CanonicalHistogram("engine:ttft_seconds",
                       ("vllm:time_to_first_token_seconds",),
                       ("sglang:time_to_first_token_seconds",),
                       "Time to first token per request."),
    CanonicalHistogram("engine:tpot_seconds",
                       ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"),
                       ("sglang:time_per_output_token_seconds", "sglang:inter_token_latency_seconds"),
                       "Time per output token: per request (vLLM >= 0.11), else per token."),
    CanonicalHistogram("engine:itl_seconds",
                       ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
                       ("sglang:inter_token_latency_seconds",),
                       "Inter-token latency per generated token."),
    CanonicalHistogram("engine:e2e_latency_seconds",
                       ("vllm:e2e_request_latency_seconds",),
                       ("sglang:e2e_request_latency_seconds",),
                       "End-to-end latency per finished request."),
    CanonicalHistogram("engine:queue_time_seconds",
                       ("vllm:request_queue_time_seconds",),
                       ("sglang:queue_time_seconds", "sglang:waiting_request_latency_seconds"),
                       "Time a request waited before its first schedule."),
    CanonicalHistogram("engine:request_prompt_tokens",
                       ("vllm:request_prompt_tokens",),
                       ("sglang:prompt_tokens_histogram", "sglang:request_prompt_tokens"),
                       "Prompt length per finished request."),
    CanonicalHistogram("engine:request_generation_tokens",
                       ("vllm:request_generation_tokens",),
                       ("sglang:generation_tokens_histogram", "sglang:request_generation_tokens"),
                       "Generated length per finished request."),
)


def canonical_rules() -> list[dict[str, Any]]:
    """The canonical recording rules, in order (first part of the ``engines`` group)."""
    rules: list[dict[str, Any]] = []
    for c in CANONICAL:
        if isinstance(c, Canonical):
            rules.append({"record": c.record, "expr": or_chain(c.terms)})
            continue
        for suffix in ("_bucket", "_sum", "_count"):
            if suffix == "_bucket":  # vLLM and SGLang series never share labels: guard within each engine
                chains = [bucket_chain([V(n + suffix) for n in c.vllm]),
                          bucket_chain([S(n + suffix) for n in c.sglang])]
                expr = " or ".join(chains)
            else:
                expr = or_chain(_hist(c.vllm, c.sglang, suffix))
            rules.append({"record": c.record + suffix, "expr": expr})
    return rules


def _without(labels: Sequence[str]) -> str:
    return f"without ({', '.join(labels)})"


SCHED = _without(RANK_LABELS)
ENDPOINT_KEEP_ENGINE = _without(("model_name", *RANK_LABELS))


# Windows of the departure rate, shortest first. The service rate is the rate over the shortest window that
# saw at least MIN_DEPARTURES requests leave (enough that one more or less moves it by an eighth), so it
# follows the engine within 15 s when it is busy and is never diluted by an idle period before a burst.
DEPARTURE_WINDOWS = ("15s", "30s", "1m")
MIN_DEPARTURES = 8


def _seconds(window: str) -> int:
    return int(window[:-1]) * (60 if window.endswith("m") else 1)


def service_rate() -> str:
    """``engine:request_service_rate``: the departure rate of the shortest window with evidence, else the
    higher of the longest window's rate and what the running batch drains (a burst's first seconds, before
    anything finished)."""
    terms = [f"sum without (window) (engine:request_departures:rate{{window=\"{w}\"}}"
             f" >= {MIN_DEPARTURES / _seconds(w):g})" for w in DEPARTURE_WINDOWS[:-1]]
    longest = f"sum without (window) (engine:request_departures:rate{{window=\"{DEPARTURE_WINDOWS[-1]}\"}})"
    fallback = ("max without (source) (\n"
                f'  label_replace({longest}, "source", "departures", "", "")\n'
                '  or label_replace(engine:request_service_rate:batch, "source", "batch", "", "")\n)')
    return "\nor ".join([*terms, fallback])
SCHED_REASON = _without(("finished_reason", *RANK_LABELS))
COMPLETION_HANDLERS = "/v1/completions|/v1/chat/completions"


def departures(window: str) -> str:
    """Requests/s leaving the engine over ``window``: finished for any reason (vLLM's and SGLang's aborts
    included where they count them) or completions (E2E observations), whichever is higher, plus the
    completions vLLM's HTTP server answered beyond what its engine finished (client disconnects its stats
    never see, as in ``engine:request_aborts:rate2m``)."""
    by_reason = f"sum {SCHED_REASON} (rate(engine:requests_finished_total[{window}]))"
    completions = f"sum {SCHED} (rate(engine:e2e_latency_seconds_count[{window}]))"
    # The higher of the two counts (`(a >= b) or b or a`: an element-wise max that falls back to either).
    finished = f"{by_reason} >= {completions}\n  or {completions}\n  or {by_reason}"
    answered = f'http_requests_total{{handler=~"{COMPLETION_HANDLERS}", status="2xx"}}'
    engine_finished = V("vllm:request_success_total")
    http_aborts = (f"clamp_min(\n    sum by (job, instance) (rate({answered}[{window}]))\n"
                   f"    - on (job, instance) sum by (job, instance) (rate({engine_finished}[{window}])),\n    0)")
    return f"(\n  ({finished})\n  + on (job, instance) group_left ()\n  {http_aborts}\n)\nor ({finished})"


def service_time(window: str) -> str:
    """Mean seconds a request spends in the running batch (E2E minus queue time) over ``window``."""
    e2e = f"sum {SCHED} (rate(engine:e2e_latency_seconds_sum[{window}]))"
    queue = f"sum {SCHED} (rate(engine:queue_time_seconds_sum[{window}]))"
    count = f"sum {SCHED} (rate(engine:e2e_latency_seconds_count[{window}]))"
    return f"(({e2e} - ({queue} or 0 * {e2e})) / {count} > 0)"


def batch_service_rate() -> str:
    """Running requests / mean service time (the last minute's, else the last 5 minutes'), only while the
    engine produced tokens in the last 30 s: a stuck batch drains nothing."""
    return (f"sum {SCHED} (engine:requests_running)\n/ ({service_time('1m')}\n   or {service_time('5m')})\n"
            f"and sum {SCHED} (rate(engine:generation_tokens_total[30s])) > 0")


# Below this share of the expected scrapes in the last minute, or with the latest scrape older than this many
# scrape intervals, the rates of short windows are biased (docs/engines.md, "Honest about missing samples").
MIN_SCRAPE_COVERAGE = 0.75
MAX_SCRAPE_AGE_INTERVALS = 2.5
ENGINE_TARGETS = "and on (job, instance) count by (job, instance) (engine:requests_waiting)"
UNKNOWN_GATE = "unless on (job, instance) engine:signals_unknown"


def coverage_rules() -> list[dict[str, Any]]:
    """How complete each engine's recent samples are, and when its derived rates are unknown (``engines``
    group, before the rates that are gated on it)."""
    return [
        # Scrapes tried in the last minute (up is written on every try, 0 when it failed); the best minute of
        # the last 10 is what a complete minute holds, whatever the scrape interval.
        {"record": "engine:scrape_samples:count1m", "expr": f"count_over_time(up[1m])\n{ENGINE_TARGETS}"},
        {"record": "engine:scrape_interval_seconds:estimate",
         "expr": "60 / max_over_time(engine:scrape_samples:count1m[10m])"},
        {"record": "engine:scrape_coverage_ratio",
         "expr": ("clamp_max(sum_over_time(up[1m]) / max_over_time(engine:scrape_samples:count1m[10m]), 1)"
                  f"\n{ENGINE_TARGETS}")},
        {"record": "engine:scrape_age_seconds", "expr": f"time() - timestamp(up)\n{ENGINE_TARGETS}"},
        # 1 per reason the short-window rates of an endpoint are unknown right now; absent while they are known.
        {"record": "engine:signals_unknown",
         "expr": f"engine:scrape_coverage_ratio < bool {MIN_SCRAPE_COVERAGE} == 1",
         "labels": {"reason": "coverage"}},
        {"record": "engine:signals_unknown",
         "expr": (f"engine:scrape_age_seconds > bool {MAX_SCRAPE_AGE_INTERVALS} * "
                  "engine:scrape_interval_seconds:estimate == 1"),
         "labels": {"reason": "stale"}},
    ]


def derived_rules() -> list[dict[str, Any]]:
    """Rates, ratios and the predicted queue wait over the canonical series (``engines`` group, part 2)."""
    completions_1m = "rate(engine:e2e_latency_seconds_count[1m])"
    return [
        {"record": "engine:prefix_cache_hit_ratio:rate5m",
         "expr": "rate(engine:prefix_cache_hits_total[5m]) / rate(engine:prefix_cache_queries_total[5m])"},
        # The same over 2 minutes: what EnginePrefixCacheThrashing watches (a 5-minute ratio takes over 4 minutes
        # to fall from 80 % to 15 %; measured on a real vLLM, docs/engines.md "tested against real engines").
        {"record": "engine:prefix_cache_hit_ratio:rate2m",
         "expr": "rate(engine:prefix_cache_hits_total[2m]) / rate(engine:prefix_cache_queries_total[2m])"},
        {"record": "engine:preemptions:rate5m", "expr": "rate(engine:preemptions_total[5m])"},
        {"record": "engine:prompt_tokens:rate1m", "expr": "rate(engine:prompt_tokens_total[1m])"},
        {"record": "engine:generation_tokens:rate1m", "expr": "rate(engine:generation_tokens_total[1m])"},
        {"record": "engine:generation_tokens:rate5m", "expr": "rate(engine:generation_tokens_total[5m])"},
        {"record": "engine:request_completions:rate1m", "expr": f"{completions_1m}\n{UNKNOWN_GATE}"},
        # Requests aborted per second (the client left), per endpoint. Engines that count aborts as finished
        # requests (SGLang) give them directly. vLLM 0.32 does not: its API server drops a request whose client
        # disconnected before the engine's stats see it, so request_success_total{finished_reason="abort"} stays
        # 0 (seen on a real engine). There, aborts are the completion requests its HTTP server answered (2xx,
        # counted when the stream closes, also when the client left) minus the requests the engine finished.
        {"record": "engine:request_aborts:rate2m",
         "expr": ('sum by (job, instance) (rate(engine:requests_finished_total{finished_reason="abort"}[2m])) > 0\n'
                  "or on (job, instance) clamp_min(\n"
                  '  sum by (job, instance) (rate(http_requests_total{handler=~"/v1/completions|/v1/chat/completions"'
                  ', status="2xx"}[2m]))\n'
                  '  - on (job, instance) sum by (job, instance) (rate(vllm:request_success_total{server=""}[2m])),\n'
                  "  0)")},
        {"record": "engine:request_completions:rate5m",
         "expr": "rate(engine:e2e_latency_seconds_count[5m])"},
        # How many requests per second leave the engine, and so how fast its queue drains (docs/engines.md,
        # "Predicted queue wait"): every way out counts (finished, aborted). A minute that still holds an idle
        # period dilutes a 1-minute rate; the 15 s window does not.
        *({"record": "engine:request_departures:rate", "expr": departures(w), "labels": {"window": w}}
          for w in DEPARTURE_WINDOWS),
        # What the running batch drains when the engine is producing tokens: running / mean service time.
        {"record": "engine:request_service_rate:batch", "expr": batch_service_rate()},
        # Requests/s the engine serves now (see service_rate).
        {"record": "engine:request_service_rate", "expr": f"(\n{service_rate()}\n)\n{UNKNOWN_GATE}"},
        # Little's law on the queue: a request arriving now waits for the queue ahead of it to drain at the
        # engine's service rate. clamp_min keeps an idle engine at 0 instead of 0/0; an engine that finishes
        # nothing and produces no tokens reads waiting / 0.001.
        {"record": "engine:predicted_queue_wait_seconds",
         "expr": f"sum {SCHED} (engine:requests_waiting)\n/ clamp_min(engine:request_service_rate, 0.001)"},
    ]


def capacity_rules() -> list[dict[str, Any]]:
    """KV capacity, B_max, in-flight concurrency and headroom (``engines`` group, part 3)."""
    per_engine_max = "max without (tp_rank, pp_rank, moe_ep_rank)"
    per_engine_sum = "sum without (model_name, engine_type, dp_rank, pid)"
    request_level = "sum without (model_name, pid)"
    mean_from_histograms = (
        f"({request_level} (rate(engine:request_prompt_tokens_sum[5m]))"
        f" + {request_level} (rate(engine:request_generation_tokens_sum[5m])))"
        f"\n/ {request_level} (rate(engine:request_prompt_tokens_count[5m]))"
    )
    mean_from_counters = (
        f"({request_level} (rate(engine:prompt_tokens_total[5m]))"
        f" + {request_level} (rate(engine:generation_tokens_total[5m])))"
        f"\n/ {request_level} (rate(engine:e2e_latency_seconds_count[5m]))"
    )
    return [
        {"record": "engine:kv_cache_capacity_tokens",
         "expr": ("watchdog_engine_kv_cache_blocks * watchdog_engine_kv_cache_block_size_tokens\nor "
                  + S("sglang:max_total_num_tokens"))},
        {"record": "engine:kv_cache_capacity_tokens:sum",
         "expr": f"{per_engine_sum} ({per_engine_max} (engine:kv_cache_capacity_tokens))"},
        {"record": "engine:request_tokens:mean5m",
         "expr": f"({mean_from_histograms})\nor\n({mean_from_counters})"},
        {"record": "engine:kv_cache_max_concurrency",
         "expr": "engine:kv_cache_capacity_tokens:sum / engine:request_tokens:mean5m"},
        {"record": "engine:requests_in_flight",
         "expr": f"{per_engine_sum} ({per_engine_max} (engine:requests_running + engine:requests_waiting))"},
        {"record": "engine:requests_in_flight:littles_law_5m",
         "expr": f"{request_level} (rate(engine:e2e_latency_seconds_sum[5m]))"},
        {"record": "engine:kv_cache_usage_ratio:max",
         "expr": f"max {ENDPOINT_KEEP_ENGINE} (engine:kv_cache_usage_ratio)"},
        {"record": "engine:kv_cache_free_tokens",
         "expr": "engine:kv_cache_capacity_tokens:sum * (1 - engine:kv_cache_usage_ratio:max)"},
        # The smaller of the modelled headroom (demand vs B_max) and the measured one (free KV):
        # `(a <= b) or b` is an element-wise min that also falls back to b where a is absent or NaN.
        {"record": "engine:capacity_headroom_ratio",
         "expr": ("(1 - engine:requests_in_flight / engine:kv_cache_max_concurrency)"
                  "\n<= (1 - engine:kv_cache_usage_ratio:max)\nor (1 - engine:kv_cache_usage_ratio:max)")},
    ]


def plan_rules() -> list[dict[str, Any]]:
    """The capacity planner's live figures (``engines`` group, part 4; docs/capacity.md, "The loop")."""
    request_level = "sum without (model_name, pid)"
    p90 = "histogram_quantile(0.9, {agg} (rate(engine:request_{kind}_tokens_bucket[5m])))"
    return [
        # P90 prompt plus P90 output tokens: at least the P90 of the total, so B_max errs safe.
        {"record": "engine:request_tokens:p90_5m",
         "expr": (p90.format(agg=request_level, kind="prompt") + "\n+ "
                  + p90.format(agg=request_level, kind="generation"))},
        # Requests of P90 length the KV pool holds at once (`inference-watchdog plan`'s B_max at P90).
        {"record": "engine:b_max_p90",
         "expr": "floor(engine:kv_cache_capacity_tokens:sum / engine:request_tokens:p90_5m)"},
        # Seconds until the requests in flight (Little's law) reach B_max at P90 if the last 15 minutes'
        # trend holds; 0 once there; absent while the trend is flat or falling.
        {"record": "engine:memory_bound_eta_seconds",
         "expr": ("clamp_min(engine:b_max_p90 - engine:requests_in_flight:littles_law_5m, 0)"
                  "\n/ (deriv(engine:requests_in_flight:littles_law_5m[15m]) > 0)")},
    ]


HEADER = """\
# Engine-neutral signals: the canonical engine:* series (docs/engines.md) over vLLM (V0, V1 0.7 to
# current) and SGLang (0.3 to current), plus rates, predicted queue wait, live capacity headroom, and the
# KV exhaustion forecast with its alert EngineKvExhaustionPredicted (docs/forecast.md).
# GENERATED by `python -m watchdog.engines.canonical` from watchdog/engines/canonical.py and
# watchdog/engines/kv_forecast.py: edit those. Formulas and caveats: docs/engines.md, docs/forecast.md.
# Loaded into Prometheus, these read the engines' series from Prometheus' own scrape of the engines (the
# agent exports them only with exporter.pass_through_engine_series): docs/operations.md.
"""


def render_rule_file() -> dict[str, Any]:
    """The whole ``rules/engines.yaml`` document."""
    # One group: Prometheus evaluates the rules of a group in order at the same timestamp, so derived
    # rules (and the forecast) see this evaluation's canonical series. (Groups run independently.)
    rules = canonical_rules() + coverage_rules() + derived_rules() + capacity_rules() + plan_rules() + forecast_rules()
    return {"groups": [{"name": "engines", "rules": rules}]}


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings as YAML block literals, so long expressions stay readable; no aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_LiteralDumper.add_representer(str, _str_representer)


def dump_rule_yaml(doc: dict[str, Any]) -> str:
    """A rule-file document as YAML text: keys in order, expressions with newlines as block literals."""
    return yaml.dump(doc, Dumper=_LiteralDumper, sort_keys=False, width=1000)


def render_text() -> str:
    """``rules/engines.yaml`` as text (header comment plus YAML)."""
    return HEADER + dump_rule_yaml(render_rule_file())


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(render_text())
