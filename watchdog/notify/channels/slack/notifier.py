"""The Slack notifier: Block Kit messages through slack-sdk, bot-token mode or incoming-webhook mode.

Bot-token mode (``chat.postMessage``): one message per group of alerts; its ``ts`` is kept so that a
resolve edits the message (``chat.update``) and replies in its thread, and runbook events (diagnostics,
suggestions, decisions, results) go in the thread too. Webhook mode (``slack_sdk.webhook``) posts every
notification as its own message (webhooks can neither edit nor thread). The messages, their ``ts`` and the
message each alert is listed in are Slack's own rows (:mod:`watchdog.notify.channels.slack.store`),
written in the tick's transaction when planned and in the delivery's when posted.

Shown once: every post carries its idempotency key in message ``metadata``
(``event_type=inference_watchdog_notification``). When an attempt's outcome is unknown (the agent died
mid-send, or the request timed out after Slack may have acted on it) the row is *verified* before it is
sent again: ``conversations.history`` (or ``conversations.replies`` for thread replies) is searched for a
message whose metadata carries the key; if found, its ``ts`` is adopted and nothing is re-posted.
``chat.update`` is idempotent by nature. Webhook mode cannot look anything up (documented limit).

Rate limits: the SDK's retry handler waits out ``Retry-After`` when it is short (at most
``rate_limit_max_wait_seconds``); longer waits go back to the outbox, which honours ``Retry-After``
without blocking shutdown. 5xx answers are retried by the SDK's server-error handler, then by the outbox.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import socket
import sqlite3
import urllib.error
from collections.abc import Callable, Iterable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler, ServerErrorRetryHandler
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web import WebClient
from slack_sdk.webhook import WebhookClient

from watchdog.config.settings import SlackSettings
from watchdog.infra.logs import redact
from watchdog.model import Alert, AlertState
from watchdog.notify.channels.slack.approvals import approvable_steps
from watchdog.notify.channels.slack.blocks import (
    Links,
    Rendered,
    render_alert_message,
    render_event,
    render_resolved_reply,
    render_standalone_resolved,
)
from watchdog.notify.channels.slack.incidents import render_cause_found, render_folded_pointer, render_incident_message
from watchdog.notify.channels.slack.store import AlertMessages, SlackStore
from watchdog.notify.decisions.grouping import DEFAULT_MEMBER_LABELS
from watchdog.notify.decisions.model import EventNotification, GroupNotification
from watchdog.notify.delivery.base import Delivered, DeliveryError, PlanContext
from watchdog.notify.delivery.outbox import OutboxItem, OutboxRow

log = logging.getLogger("watchdog.notify.slack")

METADATA_EVENT_TYPE = "inference_watchdog_notification"
GC_EVERY_MS = 3_600_000
# Errors that reject this one message for good; anything else (auth, channel, outage) is retried.
PERMANENT_ERRORS = frozenset(
    {
        "invalid_blocks",
        "invalid_blocks_format",
        "msg_too_long",
        "no_text",
        "too_many_attachments",
        "invalid_metadata_format",
        "invalid_metadata_schema",
        "metadata_too_large",
        "message_not_found",
        "cant_update_message",
        "edit_window_closed",
        "invalid_payload",
        "invalid_attachments",
    }
)


class CappedRateLimitRetryHandler(RateLimitErrorRetryHandler):
    """The SDK's 429 handler (sleeps ``Retry-After``) for short waits only; longer ones go to the outbox."""

    def __init__(self, max_wait_seconds: float, max_retry_count: int = 2) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.max_wait_seconds = max_wait_seconds

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is None or response.status_code != 429:
            return False
        return _retry_after(response.headers) <= self.max_wait_seconds


def _retry_after(headers: Any) -> float:
    """``Retry-After`` seconds from a header mapping (values may be lists); 1 if absent or unparsable."""
    for key, value in dict(headers or {}).items():
        if key.lower() == "retry-after":
            raw = value[0] if isinstance(value, (list, tuple)) else value
            try:
                return float(raw)
            except (TypeError, ValueError):
                return 1.0
    return 1.0


def retry_handlers(max_wait_seconds: float) -> list[RetryHandler]:
    """Rate limits (short ``Retry-After``) and server errors; no blind retry of a maybe-sent request."""
    return [CappedRateLimitRetryHandler(max_wait_seconds), ServerErrorRetryHandler(max_retry_count=2)]


def _network_error(method: str, exc: BaseException) -> DeliveryError:
    """Map a transport exception; uncertain unless the request surely never reached the server."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    certain_not_sent = isinstance(reason, (ConnectionRefusedError, socket.gaierror))
    text = redact(f"{method}: {type(reason).__name__}: {reason}")
    return DeliveryError(text, uncertain=not certain_not_sent)


TRANSPORT_ERRORS = (urllib.error.URLError, OSError, http.client.HTTPException)


def _api_error(method: str, exc: SlackApiError) -> DeliveryError:
    status = exc.response.status_code
    error = str(exc.response.get("error", "") or "") if isinstance(exc.response.data, dict) else ""
    text = redact(f"{method}: {error or 'error'} (HTTP {status})")
    if status == 429 or error == "ratelimited":
        return DeliveryError(text, retry_after_seconds=_retry_after(exc.response.headers))
    return DeliveryError(text, permanent=error in PERMANENT_ERRORS)


class SlackNotifier:
    """Slack delivery (see module docstring). ``token`` for bot mode, ``webhook_url`` for webhook mode."""

    name = "slack"
    batch_size = 1

    def __init__(
        self,
        settings: SlackSettings,
        store: SlackStore,
        node: str,
        *,
        token: str | None = None,
        webhook_url: str | None = None,
        approve_mode: bool = False,
        interactive: bool = False,
        runbook_title: Callable[[str], str] | None = None,
        member_labels: tuple[str, ...] = DEFAULT_MEMBER_LABELS,
        keep_ms: int,
    ) -> None:
        """``keep_ms``: how long a message no alert is listed in is remembered (``keep_delivered_days``)."""
        self.settings = settings
        self.store = store
        self.keep_ms = keep_ms
        self._last_gc_ms = 0
        self.node = node
        self.mode = settings.mode.value
        self.channel = settings.channel
        self.links = Links(settings.grafana_url, settings.runbook_base_url)
        self.max_members = settings.max_members_listed
        self.max_chars = settings.diagnostics_max_chars
        self.broadcast_resolved = settings.broadcast_resolved
        self.approve_mode = approve_mode and self.mode == "bot"
        # Acknowledge / Silence buttons only where a Slack app receives the clicks (Socket Mode).
        self.interactive = interactive and self.mode == "bot"
        self.runbook_title = runbook_title or (lambda _id: "")
        self.member_labels = member_labels
        timeout = settings.timeout_seconds
        handlers = retry_handlers(settings.rate_limit_max_wait_seconds)
        self.web: WebClient | None = None
        self.webhook: WebhookClient | None = None
        if self.mode == "webhook" and webhook_url:
            self.webhook = WebhookClient(webhook_url, timeout=timeout, retry_handlers=handlers)
        elif self.mode == "bot" and token:
            self.web = WebClient(token=token, base_url=settings.base_url, timeout=timeout, retry_handlers=handlers)

    # -- planning (pure apart from ctx) -------------------------------------------------------------
    def plan(
        self, groups: list[GroupNotification], events: list[EventNotification], ctx: PlanContext
    ) -> list[OutboxItem]:
        """Posts for firing groups, reply + update per message for resolves, thread replies for events.

        One incident, one message (bot mode): a symptom whose cause has a message is folded into it (the
        message is re-rendered with ``chat.update``, see :mod:`watchdog.notify.channels.slack.incidents`), never posted
        on its own; a symptom posted before its cause fired is folded when the cause's message exists, and
        its own message becomes a pointer to the incident.
        """
        items: list[OutboxItem] = []
        listed = self.store.listing(ctx.cur, ctx.alerts)
        # Causes before symptoms, so a symptom firing in the same tick finds its cause's message.
        groups = sorted(groups, key=lambda g: all(m.fingerprint in ctx.causes for m in g.members))
        touched: set[str] = set()  # messages whose incident view may have changed this tick
        for group in groups:
            if self.mode == "webhook":
                items.append(self._webhook_group(group))
            elif group.kind is AlertState.FIRING:
                parent = self._incident_message({m.fingerprint for m in group.members}, ctx, listed)
                if parent:
                    self._fold(group.members, parent, listed, touched)
                elif adopted := self._adoptable_message(group, ctx, listed):
                    items.append(self._adopt(group, adopted, ctx, listed, touched))
                else:
                    items.append(self._plan_firing(group, ctx, listed))
            else:
                items.extend(self._plan_resolved(group, listed, touched))
        if self.mode == "bot":
            touched.update(self._folded_and_resolved(ctx, listed))
            items.extend(self._fold_earlier(ctx, listed, touched))
            items = self._incident_updates(items, touched, ctx, listed)
        for ev in events:
            items.append(self._plan_event(ev, listed))
        self.store.save_listing(ctx.cur, listed)
        if ctx.now_ms - self._last_gc_ms >= GC_EVERY_MS:
            self._last_gc_ms = ctx.now_ms
            self.store.gc(ctx.cur, ctx.now_ms - self.keep_ms)
        return items

    def _render(self, members: list[Alert], resolved: list[str]) -> Rendered:
        title = self.runbook_title(members[0].annotations.get("runbook", ""))
        return render_alert_message(
            members, resolved, self.node, self.links, title, self.max_members, self.member_labels,
            interactive=self.interactive,
        )

    def _webhook_group(self, group: GroupNotification) -> OutboxItem:
        members = list(group.members)
        body = (
            self._render(members, [])
            if group.kind is AlertState.FIRING
            else render_standalone_resolved(members, self.node, self.links)
        )
        return OutboxItem(f"webhook:{group.key}", "webhook", {"text": body.text, "blocks": body.blocks})

    def _plan_firing(self, group: GroupNotification, ctx: PlanContext, listed: AlertMessages) -> OutboxItem:
        message_key = f"msg:{group.key}"
        self.store.add_message(ctx.cur, message_key, list(group.members), ctx.now_ms)
        for member in group.members:
            listed.list_in(member.fingerprint, message_key)
        body = self._render(list(group.members), [])
        return OutboxItem(
            f"post:{group.key}",
            "post",
            {"channel": self.channel, "text": body.text, "blocks": body.blocks, "message_key": message_key},
        )

    # -- incidents: one message per incident, cause first, symptoms folded -------------------------------
    @staticmethod
    def _incident_message(fingerprints: set[str], ctx: PlanContext, listed: AlertMessages) -> str:
        """The message of the one incident every member is a symptom of: its cause's message, else (the
        cause is not firing yet) the first message posted for another symptom of it; "" when none."""
        causes = {ctx.causes.get(fp, "") for fp in fingerprints}
        if len(causes) != 1 or "" in causes:
            return ""
        cause = causes.pop()
        if key := listed.of(cause):
            return key
        siblings = sorted((ctx.alerts[s].fired_at_ms, listed.of(s)) for s, c in ctx.causes.items()
                          if c == cause and s not in fingerprints and s in ctx.alerts and listed.of(s))
        return siblings[0][1] if siblings else ""

    def _adoptable_message(self, group: GroupNotification, ctx: PlanContext, listed: AlertMessages) -> str:
        """A message posted for symptoms of this group's alerts before they fired (every member of it a
        symptom of this group): the cause takes it over instead of posting a second message."""
        fps = {m.fingerprint for m in group.members}
        candidates = sorted((ctx.alerts[s].fired_at_ms, listed.of(s)) for s, c in ctx.causes.items()
                            if c in fps and s in ctx.alerts and listed.of(s))
        for _, key in candidates:
            found = self.store.message(key)
            if found and found[2] and all(ctx.causes.get(m.fingerprint) in fps for m in found[2]):
                return key
        return ""

    def _adopt(self, group: GroupNotification, message_key: str, ctx: PlanContext, listed: AlertMessages,
               touched: set[str]) -> OutboxItem:
        """The cause takes over its symptoms' message: it is re-rendered cause first (``chat.update``), and a
        thread reply names the cause (an edit notifies nobody; the reply notifies the thread's followers)."""
        self.store.set_members(ctx.cur, message_key, list(group.members))
        self._fold(group.members, message_key, listed, touched)
        reply = render_cause_found(group.members[0])
        return OutboxItem(f"reply:{group.key}", "reply",
                          {"message_key": message_key, "text": reply.text, "blocks": reply.blocks,
                           "orphan": {"text": reply.text, "blocks": reply.blocks}})

    @staticmethod
    def _fold(members: Iterable[Alert], parent: str, listed: AlertMessages, touched: set[str]) -> None:
        for member in members:
            listed.list_in(member.fingerprint, parent)
        touched.add(parent)

    def _folded_and_resolved(self, ctx: PlanContext, listed: AlertMessages) -> set[str]:
        """Incident messages with a folded symptom that resolved this tick (also when muting dropped the
        resolve: a symptom inhibited by its cause is still listed in the cause's message)."""
        out = set()
        for fp in ctx.resolved:
            key = listed.of(fp)
            found = self.store.message(key) if key else None
            if found is not None and fp not in {m.fingerprint for m in found[2]}:
                out.add(key)
        return out

    def _fold_earlier(self, ctx: PlanContext, listed: AlertMessages, touched: set[str]) -> list[OutboxItem]:
        """Fold firing symptoms that are not yet in their cause's message: those muted (inhibited by the
        cause, never posted) and those posted before the cause fired (their message becomes a pointer)."""
        items: list[OutboxItem] = []
        for symptom, cause in sorted(ctx.causes.items()):
            parent, known = self._incident_message({symptom}, ctx, listed), ctx.alerts.get(symptom)
            if not parent or known is None or known.state is not AlertState.FIRING:
                continue
            own = listed.of(symptom)
            if own == parent:
                continue
            if not own:
                self._fold([known], parent, listed, touched)
                continue
            found = self.store.message(own)
            members = found[2] if found else []
            firing = [m for m in members if (k := ctx.alerts.get(m.fingerprint)) and k.state is AlertState.FIRING]
            if not firing or {ctx.causes.get(m.fingerprint) for m in firing} != {cause}:
                continue  # a message shared with alerts of other incidents stays as it is
            self._fold(members, parent, listed, touched)
            cause_known = ctx.alerts.get(cause)
            head = cause_known or known
            body = render_folded_pointer(members, head, self.node, self.member_labels)
            items.append(OutboxItem(f"update:{own}:folded:{parent}", "update",
                                    {"message_key": own, "text": body.text, "blocks": body.blocks}))
        return items

    def _message_body(self, message_key: str, members: list[Alert], ctx: PlanContext,
                      listed: AlertMessages) -> Rendered:
        """A message as it reads now: its members (struck through once resolved) and, for an incident's
        cause, the symptoms folded into it."""
        own = {m.fingerprint for m in members}
        symptoms = [k for fp, k in sorted(ctx.alerts.items(), key=lambda kv: kv[1].fired_at_ms)
                    if fp not in own and listed.of(fp) == message_key]
        done = [m.fingerprint for m in [*members, *symptoms]
                if (k := ctx.alerts.get(m.fingerprint)) is None or k.state is not AlertState.FIRING
                or listed.of(m.fingerprint) != message_key]
        title = self.runbook_title(members[0].annotations.get("runbook", ""))
        return render_incident_message(members, symptoms, done, self.node, self.links, title, self.max_members,
                                       self.member_labels, interactive=self.interactive)

    def _incident_updates(self, items: list[OutboxItem], touched: set[str], ctx: PlanContext,
                          listed: AlertMessages) -> list[OutboxItem]:
        """Re-render each touched message: in place when it is posted this tick, else with ``chat.update``
        (keyed by what it shows, so an unchanged view is not sent twice)."""
        bodies: dict[str, Rendered] = {}
        for message_key in sorted(touched):
            found = self.store.message(message_key)
            if found is not None and found[2]:
                bodies[message_key] = self._message_body(message_key, found[2], ctx, listed)
        out: list[OutboxItem] = []
        for item in items:
            key = str(item.payload.get("message_key", ""))
            if item.kind == "post" and key in bodies:
                body = bodies.pop(key)
                item = OutboxItem(item.idem_key, item.kind, {**item.payload, "text": body.text, "blocks": body.blocks})
            out.append(item)
        for message_key, body in bodies.items():
            digest = hashlib.sha256(json.dumps(body.blocks, sort_keys=True).encode()).hexdigest()[:16]
            out.append(OutboxItem(f"update:{message_key}:{digest}", "update",
                                  {"message_key": message_key, "text": body.text, "blocks": body.blocks}))
        return out

    def _plan_resolved(self, group: GroupNotification, listed: AlertMessages, touched: set[str]) -> list[OutboxItem]:
        """A reply in the thread of each message whose own members resolved (the message is updated);
        resolved symptoms of an incident only update its message."""
        by_message: dict[str, list[Alert]] = {}
        for member in group.members:
            by_message.setdefault(listed.of(member.fingerprint), []).append(member)
        items: list[OutboxItem] = []
        for message_key, resolved in by_message.items():
            sub = GroupNotification(AlertState.RESOLVED, tuple(resolved), group.at_ms)
            standalone = render_standalone_resolved(resolved, self.node, self.links)
            found = self.store.message(message_key) if message_key else None
            if found is None:
                items.append(
                    OutboxItem(
                        f"post:{sub.key}",
                        "post",
                        {"channel": self.channel, "text": standalone.text, "blocks": standalone.blocks},
                    )
                )
                continue
            touched.add(message_key)
            if not {m.fingerprint for m in found[2]} & {m.fingerprint for m in resolved}:
                continue  # only folded symptoms resolved: the incident message shows it
            reply = render_resolved_reply(resolved, self.node, self.member_labels)
            items.append(
                OutboxItem(
                    f"reply:{sub.key}",
                    "reply",
                    {
                        "message_key": message_key,
                        "text": reply.text,
                        "blocks": reply.blocks,
                        "broadcast": self.broadcast_resolved,
                        "orphan": {"text": standalone.text, "blocks": standalone.blocks},
                    },
                )
            )
        return items

    def _plan_event(self, ev: EventNotification, listed: AlertMessages) -> OutboxItem:
        e = ev.event
        approvals = [(e.fingerprint, step) for step in approvable_steps(e)] if self.approve_mode else []
        message_key = listed.of(e.fingerprint) if self.mode == "bot" else ""
        standalone = render_event(
            e.kind,
            e.title,
            e.text,
            e.alertname,
            max_chars=self.max_chars,
            approvals=approvals,
            standalone=True,
        )
        if self.mode == "webhook":
            return OutboxItem(
                f"webhook:{ev.key}", "webhook", {"text": standalone.text, "blocks": standalone.blocks}
            )
        if not message_key:
            return OutboxItem(
                f"post:{ev.key}",
                "post",
                {"channel": self.channel, "text": standalone.text, "blocks": standalone.blocks},
            )
        body = render_event(
            e.kind, e.title, e.text, e.alertname, max_chars=self.max_chars, approvals=approvals
        )
        return OutboxItem(
            f"reply:{ev.key}",
            "reply",
            {
                "message_key": message_key,
                "text": body.text,
                "blocks": body.blocks,
                "orphan": {"text": standalone.text, "blocks": standalone.blocks},
            },
        )

    # -- delivery (I/O) -----------------------------------------------------------------------------
    def _client(self) -> WebClient:
        if self.web is None:
            raise DeliveryError(
                f"slack: no bot token configured (set {self.settings.token_env} or token_file)"
            )
        return self.web

    def _metadata(self, row: OutboxRow) -> dict[str, Any]:
        return {"event_type": METADATA_EVENT_TYPE, "event_payload": {"idem_key": row.idem_key}}

    def _parent(self, row: OutboxRow) -> tuple[str, str]:
        found = self.store.message(str(row.payload.get("message_key", "")))
        return (found[0], found[1]) if found else ("", "")

    def deliver(self, rows: list[OutboxRow]) -> list[Delivered]:
        """Send one row (``batch_size`` is 1)."""
        return [self._deliver_one(row) for row in rows]

    def _deliver_one(self, row: OutboxRow) -> Delivered:
        payload = row.payload
        if row.kind == "webhook":
            return self._send_webhook(row)
        if row.kind == "post":
            return self._post(row, str(payload.get("channel") or self.channel), payload, thread_ts="")
        channel, ts = self._parent(row)
        if row.kind == "reply":
            if not ts:  # the parent was never posted (rejected): post on its own
                orphan = payload.get("orphan")
                if not orphan:
                    return Delivered(row.id, "skipped: no parent message")
                return self._post(row, self.channel, orphan, thread_ts="")
            return self._post(row, channel, payload, thread_ts=ts)
        if row.kind == "update":
            if not ts:
                return Delivered(row.id, "skipped: no parent message")
            self._call(
                "chat.update",
                lambda c: c.chat_update(
                    channel=channel, ts=ts, text=payload["text"], blocks=payload["blocks"]
                ),
            )
            return Delivered(row.id, json.dumps({"channel": channel, "ts": ts}))
        raise DeliveryError(f"slack: unknown outbox row kind {row.kind!r}", permanent=True)

    def _call(self, method: str, fn: Callable[[WebClient], Any]) -> Any:
        client = self._client()
        try:
            return fn(client)
        except SlackApiError as exc:
            raise _api_error(method, exc) from None
        except TRANSPORT_ERRORS as exc:
            raise _network_error(method, exc) from None

    def _post(self, row: OutboxRow, channel: str, body: dict[str, Any], thread_ts: str) -> Delivered:
        kwargs: dict[str, Any] = {
            "channel": channel,
            "text": body["text"],
            "blocks": body["blocks"],
            "metadata": self._metadata(row),
        }
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
            if row.payload.get("broadcast"):
                kwargs["reply_broadcast"] = True
        response = self._call("chat.postMessage", lambda c: c.chat_postMessage(**kwargs))
        return self._posted(row, str(response.get("channel") or channel), str(response.get("ts", "")))

    def _posted(self, row: OutboxRow, channel: str, ts: str) -> Delivered:
        message_key = str(row.payload.get("message_key", "")) if row.kind == "post" else ""

        def remember(cur: sqlite3.Cursor) -> None:
            if message_key:
                SlackStore.set_ts(cur, message_key, channel, ts)

        return Delivered(row.id, json.dumps({"channel": channel, "ts": ts}), remember)

    def _send_webhook(self, row: OutboxRow) -> Delivered:
        if self.webhook is None:
            raise DeliveryError(
                f"slack: no webhook URL configured (set {self.settings.webhook_url_env} "
                "or webhook_url_file)"
            )
        try:
            response = self.webhook.send(text=row.payload["text"], blocks=row.payload["blocks"])
        except TRANSPORT_ERRORS as exc:
            raise _network_error("webhook", exc) from None
        status, body = response.status_code, str(response.body or "")[:200]
        if status == 200:
            return Delivered(row.id, "ok")
        text = redact(f"webhook: {body or 'error'} (HTTP {status})")
        if status == 429:
            raise DeliveryError(text, retry_after_seconds=_retry_after(response.headers))
        raise DeliveryError(text, permanent=status == 400)

    # -- verification of uncertain rows ------------------------------------------------------------
    def verify(self, row: OutboxRow) -> Delivered | None:
        """Find an earlier, maybe-successful post of this row by its metadata key; None if not found."""
        if row.kind not in ("post", "reply") or self.web is None:
            return None
        oldest = f"{max(0, row.created_ms - 120_000) / 1000:.6f}"
        if row.kind == "reply":
            channel, parent_ts = self._parent(row)
            if not parent_ts:
                channel = self.store.known_channel() or self.channel
                method = "conversations.history"
            else:
                method = "conversations.replies"
        else:
            channel = self.store.known_channel() or str(row.payload.get("channel") or self.channel)
            method, parent_ts = "conversations.history", ""
        cursor = ""
        for _page in range(10):
            try:
                page = self._history_page(method, channel, parent_ts, oldest, cursor)
            except DeliveryError as exc:
                if exc.permanent or (not exc.retry_after_seconds and "HTTP 200" in str(exc)):
                    log.warning(
                        "cannot verify an uncertain Slack post; sending it again",
                        extra={"idem_key": row.idem_key, "error": str(exc)},
                    )
                    return None
                # 5xx, 429, a network error: the post may still exist. Stay uncertain and verify again
                # later; a blind re-post here could show the alert twice.
                raise DeliveryError(str(exc), uncertain=True, retry_after_seconds=exc.retry_after_seconds) from exc
            for message in page.get("messages", []) or []:
                meta = message.get("metadata") or {}
                if (meta.get("event_payload") or {}).get("idem_key") == row.idem_key:
                    return self._posted(row, str(page.get("channel") or channel), str(message.get("ts", "")))
            cursor = str((page.get("response_metadata") or {}).get("next_cursor", "") or "")
            if not cursor:
                break
        return None

    def _history_page(self, method: str, channel: str, parent_ts: str, oldest: str, cursor: str) -> Any:
        """One page of channel history (or of a thread when ``parent_ts``), with message metadata."""

        def fetch(client: WebClient) -> Any:
            if parent_ts:
                return client.conversations_replies(
                    channel=channel,
                    ts=parent_ts,
                    oldest=oldest,
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor or None,
                )
            return client.conversations_history(
                channel=channel, oldest=oldest, include_all_metadata=True, limit=200, cursor=cursor or None
            )

        return self._call(method, fetch)

    def periodic(self, now_ms: int) -> int | None:
        """Nothing periodic."""
        return None

    def close(self) -> None:
        """Nothing to release (urllib opens a connection per request)."""
