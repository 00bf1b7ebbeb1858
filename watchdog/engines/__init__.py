"""Engine knowledge as data: canonical recording rules, known histogram buckets, SLO and capacity rules.

- :mod:`watchdog.engines.canonical` — the engine-neutral ``engine:*`` recording rules
  (``rules/engines.yaml`` is rendered from it).
- :mod:`watchdog.engines.buckets` — histogram bucket boundaries per engine kind and version.
- :mod:`watchdog.engines.slo` — rule groups generated from the config's SLO targets.
- :mod:`watchdog.engines.config_series` — numeric series derived from info-style config labels.
"""
