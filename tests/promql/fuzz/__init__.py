"""A differential fuzzer: random input series, PromQL expressions, alert rules and templates, run
through real ``promtool test rules`` (Prometheus 2.42, the oracle) and through our runner.

``generate`` builds the random material, ``differ`` runs both tools on it, compares their output case
by case, minimises every disagreement and prints it as a promtool test file. Run a long session with
``scripts/promql-fuzz`` (``--help``); ``tests/promql/test_fuzz.py`` runs a small fixed-seed budget.
"""
