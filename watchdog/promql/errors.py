"""The one exception type of the PromQL package."""

from __future__ import annotations


class PromQLError(Exception):
    """A query that cannot be parsed, is unsupported, or fails during evaluation.

    ``kind`` follows Prometheus' HTTP API ``errorType``: ``bad_data`` for parse and validation errors,
    ``execution`` for errors raised while evaluating (e.g. many-to-many matching), ``timeout`` when an
    evaluation ran past its deadline.
    """

    def __init__(self, message: str, kind: str = "bad_data") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


def evaluation_error(message: str) -> PromQLError:
    """An error raised while evaluating a valid query."""
    return PromQLError(message, kind="execution")


class TooManySamples(PromQLError):
    """An evaluation that would hold more samples in memory at once than its limit allows (Prometheus'
    ``--query.max-samples``); ``kind`` is ``execution``, as in Prometheus' HTTP API."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="execution")
