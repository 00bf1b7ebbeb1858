"""The notifier registry: every notifier by name, built from its own settings section.

Contract: the name is the ``notifiers.<name>`` section, the outbox rows' notifier, the log's and the
self-metrics' ``notifier`` label. A builder gets the ``notifiers`` settings and a
:class:`NotifierContext` (what the dispatcher shares with its notifiers) and returns the notifier, or None
when its section disables it. Adding a notifier: a module with a class of the
:class:`~watchdog.notify.delivery.base.Notifier` shape and a builder, one line here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from watchdog.config.settings import NotifiersSettings, RemediationMode, SlackMode, SlackSettings
from watchdog.infra.secrets import SecretError, read_secret
from watchdog.infra.state import StateDB
from watchdog.model import Alert
from watchdog.notify.channels.alertmanager import AlertmanagerNotifier
from watchdog.notify.channels.log import LogNotifier
from watchdog.notify.channels.slack.store import SlackStore
from watchdog.notify.delivery.base import Notifier

log = logging.getLogger("watchdog.notify")


@dataclass(frozen=True)
class NotifierContext:
    """What notifiers may need beyond their section: the node, time, the state database (for rows of
    their own), the firing alerts and the agent's settings they depend on (``remediation.mode`` for
    Slack's buttons, the tick and the exporter's address for Alertmanager)."""

    node: str
    clock: Callable[[], float]
    db: StateDB
    firing_source: Callable[[], list[Alert]]
    remediation_mode: RemediationMode
    tick_seconds: float
    listen: str
    stream: TextIO | None = None
    runbook_title: Callable[[str], str] | None = None


def build_log(settings: NotifiersSettings, ctx: NotifierContext) -> Notifier | None:
    """The log notifier (``notifiers.log``)."""
    section = settings.log
    return LogNotifier(ctx.stream, section.format.value) if section.enabled else None


def build_slack(settings: NotifiersSettings, ctx: NotifierContext) -> Notifier | None:
    """The Slack notifier (``notifiers.slack``); its secret is read here, and a missing one is logged
    (notifications then queue until it is fixed)."""
    section = settings.slack
    if not section.enabled:
        return None
    # Imported here, not at the top: slack-sdk (and the asyncio it pulls in) costs memory on every host,
    # most of which never enable Slack.
    from watchdog.notify.channels.slack.notifier import SlackNotifier

    token = webhook = None
    try:
        if section.mode is SlackMode.WEBHOOK:
            webhook = read_secret(section.webhook_url_env, section.webhook_url_file)
        else:
            token = read_secret(section.token_env, section.token_file)
    except SecretError as exc:
        log.error("slack secret unavailable; slack notifications queue until it is fixed",
                  extra={"error": str(exc)})
    if token is None and webhook is None:
        log.error("slack is enabled but has no token / webhook URL; notifications will queue")
    return SlackNotifier(
        section, SlackStore(ctx.db), ctx.node, token=token, webhook_url=webhook,
        approve_mode=ctx.remediation_mode is RemediationMode.APPROVE, runbook_title=ctx.runbook_title,
        member_labels=settings.grouping.member_labels, interactive=app_token(section) is not None,
        keep_ms=int(settings.outbox.keep_delivered_days * 86_400_000),
    )


def app_token(section: SlackSettings) -> str | None:
    """The Slack app-level token (Socket Mode: buttons can be received) when configured and readable."""
    try:
        token = read_secret(section.app_token_env, section.app_token_file)
    except SecretError as exc:
        log.error("slack app token unavailable; buttons disabled", extra={"error": str(exc)})
        return None
    return token or None


def build_alertmanager(settings: NotifiersSettings, ctx: NotifierContext) -> Notifier | None:
    """The Alertmanager notifier (``notifiers.alertmanager``), when enabled and given URLs."""
    section = settings.alertmanager
    if not (section.enabled and section.urls):
        return None
    port = ctx.listen.rsplit(":", 1)[-1]
    return AlertmanagerNotifier(
        section, ctx.node, tick_seconds=ctx.tick_seconds,
        default_generator_url=f"http://{ctx.node}:{port}/alerts",
        firing_source=ctx.firing_source, clock=ctx.clock,
    )


Builder = Callable[[NotifiersSettings, NotifierContext], "Notifier | None"]

# In delivery order of a tick's rows: log first (cheap, local), then Slack, then Alertmanager.
BUILDERS: dict[str, Builder] = {
    "log": build_log,
    "slack": build_slack,
    "alertmanager": build_alertmanager,
}


# Channels that keep rows of their own: their tables are made ready at start whether or not the channel is
# enabled, so a migration of their rows runs before the first tick.
CHANNEL_STORES: tuple[Callable[[StateDB], object], ...] = (SlackStore,)


def prepare_channel_stores(db: StateDB) -> None:
    """Create (or migrate) every channel's own tables."""
    for store in CHANNEL_STORES:
        store(db)


def build_notifiers(settings: NotifiersSettings, ctx: NotifierContext) -> list[Notifier]:
    """Every notifier the settings enable."""
    built = (builder(settings, ctx) for builder in BUILDERS.values())
    return [notifier for notifier in built if notifier is not None]
