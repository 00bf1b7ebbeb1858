"""The one budget every PromQL entry point evaluates under, so that no rule file or query can stop the
watchdog: not the agent's rule load, reload and ticks, not its query API, not the command line's ``query``,
``rules check``, ``rules test`` and ``rules eval``.

Contract, per stage:

- **parse**: bounded by the text, before any parser sees it (:func:`watchdog.promql.parse.check_query_size`:
  at most ``MAX_QUERY_CHARS`` characters, brackets ``MAX_NESTING`` deep, ``MAX_OPERATORS`` operators).
  Each parse stage is linear in the text (our lexer, the Rust parser, the conversion, which recurses at
  most as deep as the brackets nest), and label regexes are compiled by RE2, whose time is linear and
  whose programs are capped in size (a regex like ``((a{1000}){1000}){1000}`` is refused at once). So a
  parse is bounded without a watchdog thread: Python cannot stop a thread, and a process per parse would
  cost more than the parse. Every failure is a :class:`PromQLError` (``bad_data``), never another type.
- **evaluation**: :class:`QueryBudget` gives at most ``cpu_seconds`` of the evaluating thread's CPU time
  (a :class:`~watchdog.promql.budget.CpuBudget`, checked at every node and every subquery step) and at most
  ``max_samples`` samples held in memory at once (range-selector points, subquery steps times series,
  instant vectors); past either, the evaluation stops with a :class:`PromQLError` of kind ``timeout``
  or a :class:`TooManySamples`, and :func:`stopped_because` words it for the operator.

The agent takes its budget from ``rules.rule_timeout_seconds`` and ``rules.max_samples`` (per rule, per
tick); the command line, which evaluates one query or one rule file's tests with nothing else waiting on
it, uses :data:`COMMAND_BUDGET`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from watchdog.promql.budget import CpuBudget
from watchdog.promql.engine import DEFAULT_OPTIONS, EvalOptions
from watchdog.promql.errors import PromQLError, TooManySamples


@dataclass(frozen=True)
class QueryBudget:
    """What one evaluation may spend: CPU seconds of its thread and samples held at once (None: no limit)."""

    cpu_seconds: float | None
    max_samples: int | None

    def options(self, base: EvalOptions = DEFAULT_OPTIONS) -> EvalOptions:
        """``base`` with this budget, its clock starting now (call it just before evaluating)."""
        deadline = None if self.cpu_seconds is None else CpuBudget(self.cpu_seconds)
        return dataclasses.replace(base, deadline=deadline, sample_limit=self.max_samples)


COMMAND_BUDGET = QueryBudget(cpu_seconds=10.0, max_samples=1_000_000)
"""The command line's budget per evaluation (one ``query``, one rule evaluation of ``rules test`` or
``rules eval``): 10 CPU seconds, as long as the agent's query API gives a query, and the schema's
default ``rules.max_samples``, about 70 MB of samples."""


def stopped_because(exc: PromQLError, budget: QueryBudget) -> str:
    """``exc``'s message, plus which limit of ``budget`` stopped the evaluation when one did."""
    if isinstance(exc, TooManySamples) and budget.max_samples is not None:
        return f"{exc.message}: stopped at the sample limit of {budget.max_samples}"
    if exc.kind == "timeout" and budget.cpu_seconds is not None:
        return f"{exc.message}: stopped after the time budget of {budget.cpu_seconds:g}s of CPU time"
    return exc.message
