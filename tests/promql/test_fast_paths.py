"""Fast paths of the evaluator give what the general code gives.

Results the evaluator returns without a duplicate-label-set check are distinct by construction.

The evaluator skips Prometheus' "vector cannot contain metrics with the same labelset" check where it
cannot fire: set operations (``and``/``unless`` keep a subset of the left side, ``or`` adds only right
samples whose match group the left lacks) and filtering comparisons with a scalar (a subset of the
operand, labels untouched), given distinct operands. Random vectors over a small label alphabet (so
match groups collide often, ``__name__`` included) check that claim: a duplicate here means the check
must come back. The simple aggregations' own loop is compared with the general one, bit for bit.
"""

from __future__ import annotations

import random
import struct

import pytest

from watchdog.model import Labels, make_labels
from watchdog.promql import aggregations, binary
from watchdog.promql import nodes as n
from watchdog.promql.labels import find_duplicate

NAMES = ("__name__", "a", "b", "c")


def _vector(rng: random.Random) -> list[tuple[Labels, float]]:
    """Up to 12 distinct label sets over NAMES, each value drawn from two or three choices."""
    seen: dict[Labels, float] = {}
    for _ in range(rng.randrange(13)):
        labels = make_labels({name: rng.choice(["", "x", "y"] if name != "__name__" else ["m", "n"])
                              for name in NAMES if rng.random() < 0.8})
        seen[labels] = rng.choice([0.0, 1.0, 2.0, float("nan")])
    return list(seen.items())


def _matching(rng: random.Random) -> n.VectorMatching:
    labels = tuple(sorted(rng.sample(NAMES[1:], rng.randrange(4))))
    return n.VectorMatching(n.CARD_MANY_TO_MANY, rng.random() < 0.5, labels, ())


@pytest.mark.parametrize("seed", range(4))
def test_set_operations_of_distinct_vectors_are_distinct(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        lhs, rhs, matching = _vector(rng), _vector(rng), _matching(rng)
        for op in ("and", "or", "unless"):
            result = binary.set_operation(op, lhs, rhs, matching)
            assert find_duplicate(labels for labels, _ in result) is None, (op, lhs, rhs, matching)


@pytest.mark.parametrize("seed", range(4))
def test_filtering_comparisons_of_a_distinct_vector_are_distinct_subsets(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        vector = _vector(rng)
        for op in sorted(n.COMPARISON_OPS):
            for scalar_on_left in (False, True):
                result = binary.vector_scalar_binop(op, vector, 1.0, scalar_on_left, False)
                assert find_duplicate(labels for labels, _ in result) is None
                assert set(result) <= set(vector)


def _bits(vector: list[tuple[Labels, float]]) -> list[tuple[Labels, bytes]]:
    return [(labels, struct.pack("<d", value)) for labels, value in vector]


@pytest.mark.parametrize("seed", range(3))
def test_simple_aggregations_match_the_general_loop_bit_for_bit(seed: int) -> None:
    """``sum``/``max``/``min``/``count``/``group`` take a loop of their own: same groups, same order, same
    bits (NaN, infinities and signed zeros included) as the loop every aggregation can take."""
    rng = random.Random(seed)
    values = [0.0, -0.0, 1.5, -2.25, 1e308, float("inf"), float("-inf"), float("nan"), 3.0]
    for _ in range(400):
        vector = [(labels, rng.choice(values)) for labels, _ in _vector(rng)]
        grouping = tuple(sorted(rng.sample(NAMES[1:], rng.randrange(4))))
        without = rng.random() < 0.5
        for op in sorted(aggregations.SIMPLE_OPS):
            assert _bits(aggregations.aggregate(op, vector, grouping, without, None)) == _bits(
                aggregations.general_aggregate(op, vector, grouping, without, None)), (op, vector, grouping)
