"""Notifications: alerts and runbook events in, one durable delivery per channel out.

Three groups, each importing only the ones before it (``tests/ops/test_architecture.py``):
``decisions/`` (pure: transitions, grouping, incidents, muting and silences), ``delivery/`` (the generic
notifier contract, the outbox, the per-notifier worker and the alert state store) and ``channels/`` (the
notifiers: ``log``, ``alertmanager``, ``slack/``). :mod:`~watchdog.notify.registry` builds the channels
by name and :mod:`~watchdog.notify.dispatcher` runs them all from the agent's tick.
"""
