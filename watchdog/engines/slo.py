"""Prometheus rule groups generated from the config's SLO targets (``engines[].models`` and ``slo``).

:func:`slo_rule_groups` returns plain rule-group dicts (``{"name", "rules"}``) that ``rules render``
prints and the agent evaluates next to ``rules/engines.yaml``; :func:`slo_warnings` lists targets that
are not histogram bucket boundaries. Pure: config in, data out. Names and formulas: docs/slo.md.

Series (labels ``job``, ``instance``, ``model_name`` and configured target labels; ``slo`` = ttft|tpot|e2e):

- ``engine:<signal>_seconds:p50_1m`` ... ``:p99_5m`` for ttft, tpot, itl, e2e_latency, queue_time;
- ``engine:slo_attainment_ratio:rate5m|rate30m|rate1h|rate6h{slo}``: share of requests within target;
- ``engine:slo_error_budget_burn_rate:rate5m|...{slo}``: (1 - attainment) / (1 - objective);
- ``engine:slo_objective_ratio{slo}`` and ``engine:slo_target_seconds{slo}``: the configured values;
- ``engine:goodput_ratio:rate5m`` and ``engine:goodput_tokens_per_second:rate5m``;
- ``engine:predicted_queue_wait_over_ttft_target_ratio``: > 1 means a request arriving now is expected
  to miss its TTFT target while still queued (the fail-fast shedding signal).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from watchdog.config.settings import ModelSloSettings, Settings, SloSettings
from watchdog.engines.buckets import boundary_at_or_below, layouts_for, le_spellings
from watchdog.engines.canonical import dump_rule_yaml

SIGNALS = ("ttft", "tpot", "e2e")
HISTOGRAM = {"ttft": "engine:ttft_seconds", "tpot": "engine:tpot_seconds",
             "e2e": "engine:e2e_latency_seconds"}
QUANTILE_HISTOGRAMS = ("engine:ttft_seconds", "engine:tpot_seconds", "engine:itl_seconds",
                       "engine:e2e_latency_seconds", "engine:queue_time_seconds")
QUANTILES = (0.5, 0.9, 0.99)
QUANTILE_WINDOWS = ("1m", "5m")
ATTAINMENT_WINDOWS = ("5m", "30m", "1h", "6h")
GOODPUT_WINDOW = "5m"
# Aggregated away: vLLM's data-parallel rank and SGLang's per-scheduler rank labels (SLOs are per model
# and endpoint). Configured target labels and model_name survive.
AGGREGATE_WITHOUT = "without (engine, engine_type, tp_rank, pp_rank, moe_ep_rank, dp_rank, pid)"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SloTarget:
    """One latency target of one model (or all models, ``*``) of one endpoint."""

    index: int  # position in engines[]
    job: str
    kind: str
    model: str
    signal: str  # ttft | tpot | e2e
    target_seconds: float
    objective: float
    excluded_models: tuple[str, ...] = ()  # for '*': models of this endpoint with their own entry


def _target(entry: ModelSloSettings | None, defaults: SloSettings, signal: str) -> float | None:
    key = f"{signal}_seconds"
    own = getattr(entry, key) if entry is not None else None
    return own if own is not None else getattr(defaults, key)


def slo_targets(settings: Settings) -> list[SloTarget]:
    """Every configured target; ``slo`` defaults fill what a model entry leaves out (see docs/slo.md)."""
    defaults = settings.slo
    out: list[SloTarget] = []
    for index, engine in enumerate(settings.engines):
        models: tuple[ModelSloSettings | None, ...] = engine.models
        if not models and any(_target(None, defaults, s) is not None for s in SIGNALS):
            models = (None,)  # the endpoint's every model ('*') under the slo defaults
        named = tuple(m.model for m in engine.models if m.model != "*")
        for entry in models:
            model = entry.model if entry is not None else "*"
            for signal in SIGNALS:
                target = _target(entry, defaults, signal)
                if target is None:
                    continue
                objective = entry.objective if entry is not None and entry.objective is not None else None
                out.append(SloTarget(
                    index=index, job=engine.job, kind=engine.kind.value, model=model,
                    signal=signal, target_seconds=float(target),
                    objective=objective if objective is not None else defaults.objective,
                    excluded_models=named if model == "*" else (),
                ))
    return out


def slo_warnings(settings: Settings) -> list[str]:
    """One line per (target, known bucket layout) where the target is not a bucket boundary."""
    warnings: list[str] = []
    for t in slo_targets(settings):
        for layout in layouts_for(t.signal, t.kind):
            if any(abs(b - t.target_seconds) <= 1e-12 for b in layout.bounds):
                continue
            used = boundary_at_or_below(t.target_seconds, layout.bounds)
            effect = ("attainment is understated (conservative)" if used < t.target_seconds
                      else "no boundary is that low: attainment is overstated")
            warnings.append(
                f"engines[{t.index}] (job {t.job}) model {t.model!r}: "
                f"{t.signal}_seconds {t.target_seconds:g} is not a bucket boundary of "
                f"{layout.version} {layout.family}; "
                f"the {used:g} s bucket is used instead ({effect})")
    return warnings


# --------------------------------------------------------------------------------------------------
# rendering helpers


def _fmt(value: float) -> str:
    """A float literal for PromQL (shortest round-trip form)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _matchers(t: SloTarget, *extra: str) -> str:
    parts = [f"job={_quote(t.job)}"]
    if t.model != "*":
        parts.append(f"model_name={_quote(t.model)}")
    elif t.excluded_models:
        alternation = "|".join(re.escape(m) for m in t.excluded_models)
        parts.append(f"model_name!~{_quote(alternation)}")
    parts.extend(extra)
    return "{" + ",".join(parts) + "}"


def _static_labels(t: SloTarget, *, slo: bool = True) -> dict[str, str]:
    """Rule labels equal to the target's selector values: they keep rules distinct (promtool lint) and
    change nothing in the output, whose samples already carry these labels."""
    labels = {"slo": t.signal} if slo else {}
    labels["job"] = t.job
    if t.model != "*":
        labels["model_name"] = t.model
    return labels


def le_regex(t: SloTarget) -> str:
    """Every ``le`` spelling of the boundary each known layout would use for this target."""
    bounds = sorted({boundary_at_or_below(t.target_seconds, layout.bounds)
                     for layout in layouts_for(t.signal, t.kind)} or {t.target_seconds})
    spellings: list[str] = []
    for bound in bounds:
        spellings.extend(s for s in le_spellings(bound) if s not in spellings)
    return "|".join(re.escape(s) for s in spellings)


def attainment_expr(t: SloTarget, window: str) -> str:
    """Share of requests (SGLang tpot: tokens) within the target over ``window``.

    Numerator: the cumulative count at the chosen boundary. Several spellings/boundaries may be listed
    (engine kind 'auto'); cumulative bucket rates grow with ``le``, so ``max`` picks the largest boundary
    the histogram actually has among them, which is the one at or below the target.
    """
    hist = HISTOGRAM[t.signal]
    le = f"le=~{_quote(le_regex(t))}"
    return (f"max without (le) (sum {AGGREGATE_WITHOUT} (rate({hist}_bucket{_matchers(t, le)}[{window}])))\n"
            f"/ sum {AGGREGATE_WITHOUT} (rate({hist}_count{_matchers(t)}[{window}]))")


def quantile_rules() -> list[dict[str, Any]]:
    """p50/p90/p99 over 1m and 5m of every canonical latency histogram."""
    rules = []
    for hist in QUANTILE_HISTOGRAMS:
        for window in QUANTILE_WINDOWS:
            for q in QUANTILES:
                rules.append({
                    "record": f"{hist}:p{round(q * 100)}_{window}",
                    "expr": (f"histogram_quantile({q}, "
                             f"sum {AGGREGATE_WITHOUT} (rate({hist}_bucket[{window}])))"),
                })
    return rules


def target_rules(targets: Sequence[SloTarget]) -> list[dict[str, Any]]:
    """Attainment, burn rates, configured values, goodput and predicted-wait ratio per target."""
    rules: list[dict[str, Any]] = []
    for t in targets:
        labels = _static_labels(t)
        rules.append({"record": "engine:slo_objective_ratio", "expr": f"vector({_fmt(t.objective)})",
                      "labels": dict(labels)})
        rules.append({"record": "engine:slo_target_seconds", "expr": f"vector({_fmt(t.target_seconds)})",
                      "labels": dict(labels)})
        for window in ATTAINMENT_WINDOWS:
            rules.append({"record": f"engine:slo_attainment_ratio:rate{window}",
                          "expr": attainment_expr(t, window), "labels": dict(labels)})
        budget = _fmt(round(1.0 - t.objective, 12))
        for window in ATTAINMENT_WINDOWS:
            rules.append({
                "record": f"engine:slo_error_budget_burn_rate:rate{window}",
                "expr": f"(1 - engine:slo_attainment_ratio:rate{window}{_matchers(t, _eq('slo', t.signal))})"
                        f" / {budget}",
                "labels": dict(labels),
            })
    rules.extend(_goodput_rules(targets))
    for t in targets:
        if t.signal == "ttft":
            rules.append({
                "record": "engine:predicted_queue_wait_over_ttft_target_ratio",
                "expr": f"engine:predicted_queue_wait_seconds{_matchers(t)} / {_fmt(t.target_seconds)}",
                "labels": _static_labels(t, slo=False),
            })
    return rules


def _eq(label: str, value: str) -> str:
    return f"{label}={_quote(value)}"


def _goodput_rules(targets: Sequence[SloTarget]) -> list[dict[str, Any]]:
    """Goodput per (endpoint, model): throughput x product of the TTFT and TPOT attainments."""
    rules: list[dict[str, Any]] = []
    seen: set[tuple[int, str]] = set()
    for t in targets:
        key = (t.index, t.model)
        if key in seen:
            continue
        seen.add(key)
        parts = [x for x in targets if (x.index, x.model) == key and x.signal in ("ttft", "tpot")]
        if not parts:
            continue
        ratio = " * ignoring(slo) ".join(
            f"engine:slo_attainment_ratio:rate{GOODPUT_WINDOW}{_matchers(x, _eq('slo', x.signal))}"
            for x in parts)
        if len(parts) == 1:  # drop the slo label, as the product does
            ratio = f"sum without (slo) ({ratio})"
        rules.append({"record": f"engine:goodput_ratio:rate{GOODPUT_WINDOW}", "expr": ratio,
                      "labels": _static_labels(t, slo=False)})
        rules.append({
            "record": f"engine:goodput_tokens_per_second:rate{GOODPUT_WINDOW}",
            "expr": (f"sum {AGGREGATE_WITHOUT} (rate(engine:generation_tokens_total{_matchers(t)}"
                     f"[{GOODPUT_WINDOW}]))\n* engine:goodput_ratio:rate{GOODPUT_WINDOW}{_matchers(t)}"),
            "labels": _static_labels(t, slo=False),
        })
    return rules


def slo_rule_groups(settings: Settings, *, warn: bool = True) -> list[dict[str, Any]]:
    """The generated rule groups: latency quantiles (when engines are configured) and per-target SLO rules.

    With ``warn`` (default), every :func:`slo_warnings` line is also logged at WARNING, so the rule set's
    load, reload and ``rules render`` all say which targets fall between bucket boundaries.
    """
    if warn:
        for warning in slo_warnings(settings):
            log.warning("SLO target is not a histogram bucket boundary: %s", warning)
    groups: list[dict[str, Any]] = []
    if settings.engines:
        groups.append({"name": "engine-latency-quantiles", "rules": quantile_rules()})
    targets = slo_targets(settings)
    if targets:
        groups.append({"name": "engine-slo", "rules": target_rules(targets)})
    return groups


def render_slo_rules(settings: Settings) -> str:
    """The generated groups as one Prometheus rule file (YAML text); ``groups: []`` when nothing applies."""
    header = "# GENERATED from the config's SLO targets by watchdog.engines.slo (docs/slo.md).\n"
    return header + dump_rule_yaml({"groups": slo_rule_groups(settings, warn=False)})


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m watchdog.engines.slo CONFIG``: print the rendered rules, warnings to stderr."""
    import sys

    from watchdog.config import load_settings

    args = list(sys.argv[1:] if argv is None else argv)
    settings = load_settings(args[0] if args else None)
    for warning in slo_warnings(settings):
        print(f"warning: {warning}", file=sys.stderr)
    sys.stdout.write(render_slo_rules(settings))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
