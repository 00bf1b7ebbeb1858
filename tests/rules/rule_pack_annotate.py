#!/usr/bin/env python3
"""Fill in ``exp_annotations`` of the rule pack's promtool tests (a development helper, not a test).

promtool compares the annotations of every expected alert exactly, so each firing case of
``rules/tests/*.yaml`` needs the rendered summary, description and runbook. Writing them by hand is
error-prone; this helper renders them with our evaluator and inserts them into the file text (comments and
layout stay as written). ``promtool test rules`` then checks the result independently: it is the oracle,
so a rendering difference between the two shows up as a failing test, not as a silently wrong expectation.

Usage (from the repository root)::

    python -m tests.rules.rule_pack_annotate rules/tests/gpu_alerts.yaml [...]

Only ``exp_alerts`` entries that have no ``exp_annotations`` are touched. An entry whose labels match no
firing alert is reported and left alone (the test will fail and say why).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import yaml

from watchdog.promtool.eval_input import evaluate_input


def _node_map(node: yaml.Node) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(k.value): v for k, v in node.value}


def _render_annotations(doc: dict[str, Any], group: dict[str, Any], base_dir: str, eval_time: str,
                        alertname: str) -> list[tuple[dict[str, str], dict[str, str]]]:
    """(labels, annotations) of every firing ``alertname`` alert at ``eval_time`` of one test group."""
    spec: dict[str, Any] = {key: group[key] for key in ("interval", "input_series", "external_labels",
                                                         "external_url") if key in group}
    spec["rule_files"] = [os.path.join(base_dir, f) for f in doc.get("rule_files", [])]
    for key in ("evaluation_interval", "group_eval_order"):
        if key in doc:
            spec[key] = doc[key]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as handle:
        yaml.safe_dump(spec, handle, sort_keys=False)
        path = handle.name
    try:
        result = evaluate_input(path, eval_time)
    finally:
        os.unlink(path)
    out = []
    for alert in result.alerts:
        if alert.name == alertname and alert.state.value == "firing":
            labels = {k: v for k, v in alert.labels.items() if k != "alertname"}
            out.append((labels, dict(alert.annotations)))
    return out


def annotate_file(path: str) -> int:
    """Insert missing ``exp_annotations`` into ``path``; returns the number of entries left unmatched."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    doc = yaml.safe_load(text)
    root = yaml.compose(text)
    if root is None:
        return 0
    lines = text.splitlines(keepends=True)
    inserts: list[tuple[int, list[str]]] = []
    unmatched = 0
    base_dir = os.path.dirname(os.path.abspath(path))
    tests_node = _node_map(root)["tests"]
    for group, group_node in zip(doc["tests"], tests_node.value, strict=True):
        art_node = _node_map(group_node).get("alert_rule_test")
        if art_node is None:
            continue
        for case, case_node in zip(group.get("alert_rule_test") or [], art_node.value, strict=True):
            exp_node = _node_map(case_node).get("exp_alerts")
            if exp_node is None:
                continue
            rendered: list[tuple[dict[str, str], dict[str, str]]] | None = None
            for exp, item_node in zip(case.get("exp_alerts") or [], exp_node.value, strict=True):
                if "exp_annotations" in exp:
                    continue
                if rendered is None:
                    rendered = _render_annotations(doc, group, base_dir, str(case["eval_time"]),
                                                   str(case["alertname"]))
                want = {k: str(v) for k, v in (exp.get("exp_labels") or {}).items()}
                match = next((ann for labels, ann in rendered if labels == want), None)
                if match is None:
                    unmatched += 1
                    print(f"{path}:{item_node.start_mark.line + 1}: no firing {case['alertname']} with {want} "
                          f"at {case['eval_time']}", file=sys.stderr)
                    continue
                indent = " " * item_node.start_mark.column
                block = [f"{indent}exp_annotations:\n"]
                block += [f"{indent}  {key}: {json.dumps(value, ensure_ascii=False)}\n"
                          for key, value in sorted(match.items())]
                last = item_node.value[-1][1].end_mark  # end of the entry's last value
                end_line = last.line if last.column == 0 else last.line + 1
                inserts.append((end_line, block))
    for at, block in sorted(inserts, key=lambda item: item[0], reverse=True):
        lines[at:at] = block
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("".join(lines))
    return unmatched


def main(argv: Sequence[str] | None = None) -> int:
    """Annotate every file named; exit 1 when an expected alert did not fire."""
    paths = list(sys.argv[1:] if argv is None else argv)
    return 1 if sum(annotate_file(p) for p in paths) else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
