"""``python -m watchdog.demo.forecast_report``: lead times and false positives of the KV exhaustion forecast.

For each demo scenario (fast-forwarded through the real agent, :mod:`watchdog.demo.harness`): when
``EngineKvExhaustionPredicted`` first went pending, when the engine first preempted (the preemption
counter rose) and when KV usage first reached 90 %, and the lead time (preemption minus warning). For the
diurnal replays (:mod:`watchdog.demo.diurnal`): the share of steps with the alert active and, where the
pool fills, the lead time. The figures in docs/forecast.md come from this command.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml

from watchdog.demo.diurnal import DiurnalTraffic, diurnal_samples, replay_forecast
from watchdog.demo.harness import run_scenario
from watchdog.demo.scenario import load_scenario
from watchdog.infra.paths import asset_dir

ALERT = "EngineKvExhaustionPredicted"
WATCH = {"preempted": "increase(engine:preemptions_total[1m]) > 0",
         "kv_90": "engine:kv_cache_usage_ratio:max >= 0.9"}
SCENARIOS = ("long-context-bomb", "long-context-bomb@300", "kv-headroom-low", "healthy", "goodput-collapse",
             "gpu-hot", "gpu-fallen-off-bus", "tp-straggler")
DIURNAL = {
    "diurnal morning rise (10 min, 1 s steps)": DiurnalTraffic(start_hour=6.0, seconds=600.0, step_seconds=1.0),
    "diurnal morning rise (1 h, 10 s steps)": DiurnalTraffic(start_hour=6.0),
    "diurnal evening fall (1 h, 10 s steps)": DiurnalTraffic(start_hour=18.0),
    "diurnal morning + prompt drift from 10 min": DiurnalTraffic(drift_start_seconds=600.0,
                                                                 drift_tokens_per_second=1.0),
}


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def after_steady(name: str, seconds: int, workdir: Path) -> Path:
    """Scenario ``name`` preceded by ``seconds`` of its engines' first values (steady traffic): a copy of
    its file with every engine knob's first value repeated, in ``workdir`` (GPU knobs and faults are not
    shifted: for engine-only scenarios such as the long-context bomb)."""
    doc = yaml.safe_load(Path(load_scenario(name).source).read_text(encoding="utf-8"))
    for engine in doc["engines"]:
        for knob, text in engine.get("knobs", {}).items():
            first = re.match(r"-?[0-9.]+", str(text))
            if first:
                engine["knobs"][knob] = f"{first.group(0)}x{seconds - 1} {text}"
    doc["name"] = f"{doc['name']}@{seconds}"
    doc["duration"] = f"{seconds + int(load_scenario(name).duration_seconds)}s"
    doc.pop("expect", None)
    path = workdir / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def scenario_rows(names: Sequence[str]) -> list[str]:
    """One line per scenario (``NAME@N``: after N seconds of steady traffic, times relative to the
    scenario's own start): warned, first preemption, KV 90 %, lead seconds."""
    rows = []
    for name in names:
        base, _, steady = name.partition("@")
        with tempfile.TemporaryDirectory(prefix="forecast-report-") as tmp:
            result = run_scenario(str(after_steady(base, int(steady), Path(tmp))) if steady else name, watch=WATCH)
        shift = float(steady or 0)
        result.pending = {k: v - shift for k, v in result.pending.items()}
        result.seen = {k: v - shift for k, v in result.seen.items()}
        warned, preempted = result.pending.get(ALERT), result.seen.get("preempted")
        lead = preempted - warned if warned is not None and preempted is not None else None
        rows.append(f"| {name} | {_fmt(warned)} | {_fmt(preempted)} | {_fmt(result.seen.get('kv_90'))} "
                    f"| {_fmt(lead)} |")
    return rows


def diurnal_rows(rules: Sequence[str]) -> list[str]:
    """One line per diurnal replay: alert share, first warning, pool full, lead seconds."""
    rows = []
    for label, traffic in DIURNAL.items():
        result = replay_forecast(diurnal_samples(traffic), rules)
        warned, full = result.first_alert_seconds(), result.first_full_seconds()
        lead = full - warned if warned is not None and full is not None else None
        rows.append(f"| {label} | {result.alert_share():.1%} | {_fmt(warned)} | {_fmt(full)} | {_fmt(lead)} |")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Print both tables (Markdown); scenario names as arguments limit the first."""
    logging.disable(logging.WARNING)
    names = list(sys.argv[1:] if argv is None else argv) or list(SCENARIOS)
    rules_dir = asset_dir("rules") or Path("rules")
    with contextlib.redirect_stdout(io.StringIO()):  # the demo's log notifier prints every alert
        scenarios = scenario_rows(names)
        replays = diurnal_rows([str(rules_dir / "engines.yaml")])
    print("| scenario | warned at s | first preemption at s | KV >= 90 % at s | lead s |")
    print("|---|---|---|---|---|")
    print("\n".join(scenarios))
    print()
    print("| replay | alert share | warned at s | pool full at s | lead s |")
    print("|---|---|---|---|---|")
    print("\n".join(replays))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
