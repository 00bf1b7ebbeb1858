"""Capacity planning: memory ledgers, KV bytes, B_max and the dual bound (``inference-watchdog plan``)."""
