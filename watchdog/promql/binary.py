"""Binary operators: arithmetic, comparison (filter or ``bool``), set operators and vector matching.

Follows Prometheus 2.42 (``VectorBinop``, ``VectorAnd/Or/Unless``, ``VectorscalarBinop``): arithmetic
drops ``__name__``; filtering comparisons and ``atan2`` keep it; ``bool`` drops it; one-to-one matching
with ``on(...)`` keeps only the ``on`` labels; ``group_x(...)`` labels are copied from the "one" side.
"""

from __future__ import annotations

from collections.abc import Callable

from watchdog.golang import gomath, gotrig
from watchdog.model import METRIC_NAME, Labels
from watchdog.promql import nodes as n
from watchdog.promql.errors import evaluation_error
from watchdog.promql.labels import drop_name, go_string, keep_only

InstantVector = list[tuple[Labels, float]]
Signature = tuple[object, ...]


_ARITH: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": gomath.div,
    "^": gomath.pow_,
    "%": gomath.mod,
    "atan2": gotrig.atan2,
}

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
}


def _arith(op: str) -> Callable[[float, float], float]:
    return _ARITH[op]


def _compare(op: str) -> Callable[[float, float], bool]:
    return _COMPARE[op]


def scalar_binop(op: str, lhs: float, rhs: float) -> float:
    """Scalar op scalar; comparisons (always ``bool`` here) give 1 or 0."""
    if op in n.COMPARISON_OPS:
        return 1.0 if _compare(op)(lhs, rhs) else 0.0
    return _arith(op)(lhs, rhs)


def vector_scalar_binop(
    op: str, vector: InstantVector, scalar: float, scalar_on_left: bool, return_bool: bool
) -> InstantVector:
    """Vector op scalar (or scalar op vector when ``scalar_on_left``)."""
    out: InstantVector = []
    if op in n.COMPARISON_OPS:
        compare = _compare(op)
        for labels, value in vector:
            keep = compare(scalar, value) if scalar_on_left else compare(value, scalar)
            if return_bool:
                out.append((drop_name(labels), 1.0 if keep else 0.0))
            elif keep:
                out.append((labels, value))
        return out
    arith = _arith(op)
    drop = op in n.ARITHMETIC_OPS
    for labels, value in vector:
        result = arith(scalar, value) if scalar_on_left else arith(value, scalar)
        out.append((drop_name(labels) if drop else labels, result))
    return out


def signature_function(matching: n.VectorMatching) -> Callable[[Labels], Signature]:
    """The function that maps a label set to its match group key."""
    if matching.on:
        names = tuple(sorted(set(matching.labels)))

        def on_signature(labels: Labels) -> Signature:
            lookup = dict(labels)
            return tuple(lookup.get(name, "") for name in names)

        return on_signature
    excluded = frozenset(matching.labels) | {METRIC_NAME}

    def ignoring_signature(labels: Labels) -> Signature:
        return tuple(pair for pair in labels if pair[0] not in excluded)

    return ignoring_signature


def _match_labels(labels: Labels, matching: n.VectorMatching) -> Labels:
    """Go ``Labels.MatchLabels``: the labels that make up the match group (for messages)."""
    names = set(matching.labels)
    if matching.on:
        return tuple(pair for pair in labels if pair[0] in names)
    return tuple(pair for pair in labels if pair[0] not in names and pair[0] != METRIC_NAME)


def set_operation(
    op: str, lhs: InstantVector, rhs: InstantVector, matching: n.VectorMatching
) -> InstantVector:
    """``and``, ``or``, ``unless`` (always many-to-many)."""
    if op == "and":
        if not lhs or not rhs:
            return []
        signature = signature_function(matching)
        right = {signature(labels) for labels, _ in rhs}
        return [sample for sample in lhs if signature(sample[0]) in right]
    if op == "or":
        if not lhs:
            return list(rhs)
        if not rhs:
            return list(lhs)
        signature = signature_function(matching)
        left = {signature(labels) for labels, _ in lhs}
        return list(lhs) + [sample for sample in rhs if signature(sample[0]) not in left]
    # unless
    if not lhs or not rhs:
        return list(lhs)
    signature = signature_function(matching)
    right = {signature(labels) for labels, _ in rhs}
    return [sample for sample in lhs if signature(sample[0]) not in right]


def _result_metric(lhs: Labels, rhs: Labels, op: str, matching: n.VectorMatching) -> Labels:
    """Labels of one result element (``resultMetric`` in Prometheus)."""
    result = dict(lhs)
    if op in n.ARITHMETIC_OPS:
        result.pop(METRIC_NAME, None)
    if matching.card == n.CARD_ONE_TO_ONE:
        if matching.on:
            result = dict(keep_only(tuple(result.items()), matching.labels))
        else:
            for name in matching.labels:
                result.pop(name, None)
    if matching.include:
        one_side = dict(rhs)
        for name in matching.include:
            value = one_side.get(name, "")
            if value:
                result[name] = value
            else:
                result.pop(name, None)
    return tuple(sorted(result.items()))


def vector_binop(
    op: str,
    lhs: InstantVector,
    rhs: InstantVector,
    matching: n.VectorMatching,
    return_bool: bool,
) -> InstantVector:
    """Vector op vector for arithmetic and comparison operators, with one-to-one/many-to-one matching."""
    if not lhs or not rhs:
        return []
    card = matching.card
    if card == n.CARD_ONE_TO_MANY:
        lhs, rhs = rhs, lhs
    signature = signature_function(matching)
    right: dict[Signature, tuple[Labels, float]] = {}
    for labels, value in rhs:
        sig = signature(labels)
        duplicate = right.get(sig)
        if duplicate is not None:
            side = "left" if card == n.CARD_ONE_TO_MANY else "right"
            raise evaluation_error(
                f"found duplicate series for the match group {go_string(_match_labels(labels, matching))} "
                f"on the {side} hand-side of the operation: [{go_string(labels)}, "
                f"{go_string(duplicate[0])}];many-to-many matching not allowed: matching labels must be "
                "unique on one side"
            )
        right[sig] = (labels, value)

    is_comparison = op in n.COMPARISON_OPS
    compare = _compare(op) if is_comparison else None
    arith = None if is_comparison else _arith(op)
    swapped = card == n.CARD_ONE_TO_MANY
    matched: dict[Signature, set[Labels] | None] = {}
    metric_cache: dict[tuple[Labels, Labels], Labels] = {}
    out: InstantVector = []
    for labels, value in lhs:
        sig = signature(labels)
        match = right.get(sig)
        if match is None:
            continue
        left_value, right_value = (match[1], value) if swapped else (value, match[1])
        if compare is not None:
            keep = compare(left_value, right_value)
            result = left_value
        else:
            assert arith is not None
            keep = True
            result = arith(left_value, right_value)
        if return_bool:
            result = 1.0 if keep else 0.0
        elif not keep:
            continue
        key = (labels, match[0])
        metric = metric_cache.get(key)
        if metric is None:
            metric = _result_metric(labels, match[0], op, matching)
            metric_cache[key] = metric
        if return_bool:
            metric = drop_name(metric)
        if card == n.CARD_ONE_TO_ONE:
            if sig in matched:
                raise evaluation_error(
                    "multiple matches for labels: many-to-one matching must be explicit "
                    "(group_left/group_right)"
                )
            matched[sig] = None
        else:
            inserted = matched.get(sig)
            if inserted is None:
                inserted = matched[sig] = set()
            elif metric in inserted:
                raise evaluation_error(
                    "multiple matches for labels: grouping labels must ensure unique matches"
                )
            inserted.add(metric)
        out.append((metric, result))
    return out
