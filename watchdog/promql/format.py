"""Results in the shape of Prometheus' HTTP API (``/api/v1/query``'s ``data``) and as text lines."""

from __future__ import annotations

from typing import Any

from watchdog.golang.gomath import format_api_value
from watchdog.model import METRIC_NAME, format_labels, make_labels
from watchdog.promql.values import MatrixList, RangeSeries, Scalar, String, Value, VectorSample


def api_timestamp(t_ms: int) -> float | int:
    """Seconds as Prometheus writes them (an integer when whole, else the millisecond fraction)."""
    if t_ms % 1000 == 0:
        return t_ms // 1000
    return t_ms / 1000


def _metric(labels: tuple[tuple[str, str], ...]) -> dict[str, str]:
    return dict(labels)


def to_api_json(value: Value) -> dict[str, Any]:
    """``{"resultType": ..., "result": ...}`` exactly as Prometheus' ``/api/v1/query`` returns it."""
    if isinstance(value, Scalar):
        return {"resultType": "scalar", "result": [api_timestamp(value.t_ms), format_api_value(value.value)]}
    if isinstance(value, String):
        return {"resultType": "string", "result": [api_timestamp(value.t_ms), value.value]}
    items = list(value)
    if isinstance(value, MatrixList) or (items and isinstance(items[0], RangeSeries)):
        return {
            "resultType": "matrix",
            "result": [
                {
                    "metric": _metric(series.labels),
                    "values": [
                        [api_timestamp(t), format_api_value(v)]
                        for t, v in zip(series.timestamps, series.values, strict=True)
                    ],
                }
                for series in items
                if isinstance(series, RangeSeries)
            ],
        }
    return {
        "resultType": "vector",
        "result": [
            {
                "metric": _metric(sample.labels),
                "value": [api_timestamp(sample.t_ms), format_api_value(sample.value)],
            }
            for sample in items
            if isinstance(sample, VectorSample)
        ],
    }


def to_text_lines(value: Value) -> list[str]:
    """One line per sample: ``labels => value`` (matrix: ``labels => v @t, ...``)."""
    return api_text_lines(to_api_json(value))


def api_text_lines(data: dict[str, Any]) -> list[str]:
    """:func:`to_text_lines` for the ``data`` of a ``/api/v1/query`` answer (ours or a Prometheus')."""
    kind: Any = data.get("resultType")
    result: Any = data.get("result")
    if kind in ("scalar", "string"):
        return [f"{kind} => {result[1]}"]
    lines: list[str] = []
    for item in result or []:
        labels = make_labels(item["metric"])
        if "value" in item:
            lines.append(f"{_labels_text(labels)} => {item['value'][1]}")
        else:
            points = ", ".join(f"{v} @{t}" for t, v in item["values"])
            lines.append(f"{_labels_text(labels)} => {points}")
    return lines


def _labels_text(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return "{}"
    if len(labels) == 1 and labels[0][0] == METRIC_NAME:
        return labels[0][1]
    return format_labels(labels)
