"""Serving verdicts: per engine, whether a load balancer should send it traffic (see ``docs/routing.md``)."""
