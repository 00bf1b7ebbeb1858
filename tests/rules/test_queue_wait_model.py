"""rules/tests/queue_wait.yaml is what its model writes, and the model is the queue it claims to be."""

from __future__ import annotations

from pathlib import Path

from tests.rules import queue_wait_model as model

FILE = Path(__file__).resolve().parents[2] / "rules" / "tests" / "queue_wait.yaml"


def test_file_is_generated() -> None:
    assert FILE.read_text() == model.render(), "regenerate: python -m tests.rules.queue_wait_model"


def test_burst_drains_at_the_engine_capacity() -> None:
    trace = model.simulate(model.burst_arrivals, 450)
    start, end = model.BURST_START + 20, model.BURST_END
    rate = (trace.finished_stop[end] - trace.finished_stop[start]) / (end - start)
    assert rate == model.SLOTS / model.SERVICE_SECONDS
    # Queue grows at arrivals minus capacity; a request arriving then waits for the queue ahead of it.
    t = model.BURST_START + 60
    assert trace.true_wait[t] is not None
    assert abs(trace.true_wait[t] - trace.waiting[t] / rate) <= 1


def test_storm_clients_give_up_after_their_patience() -> None:
    trace = model.simulate(model.storm_arrivals, 300, patience=5)
    waits = [w for w in trace.true_wait[model.STORM_START + 15:] if w is not None]
    assert waits and max(waits) < 5
    # Five times the capacity: about four of every five requests of the storm leave the queue by abort.
    finished = trace.finished_stop[-1] - trace.finished_stop[model.STORM_START]
    assert 3.5 * finished < trace.finished_abort[-1] < 4.5 * finished
