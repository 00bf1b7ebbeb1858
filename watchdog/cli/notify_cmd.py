"""``inference-watchdog notify test [--channel slack|log] [--send] [--config PATH] [--json]``: see a
notification before the first incident.

Renders a sample alert (``GpuThermalMarginLow`` on GPU 3 of this node, with its runbook linked as the
agent links it: the installed Markdown's path, or ``runbooks.url_base``) exactly as the channel would
show it, and prints it: for Slack the fallback text and the Block Kit blocks (paste them into Slack's
Block Kit Builder), for the log the line the log notifier writes. With ``--send`` it also posts the
Slack message with the configured token or webhook (``notifiers.slack``), once, outside the outbox, and
says what Slack answered. Exit 0 shown (and sent), 1 when the send failed, 2 for a config problem.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

SAMPLE_ALERT = "GpuThermalMarginLow"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``notify`` command."""
    parser = sub.add_parser("notify", help="render (and send) a sample notification: see it before an incident")
    inner = parser.add_subparsers(dest="notify_command", metavar="ACTION")
    inner.required = True
    test = inner.add_parser("test", help="render a sample alert as a channel shows it; --send posts it")
    test.add_argument("--channel", choices=["slack", "log"], default="slack", help="which channel (slack)")
    test.add_argument("--send", action="store_true", help="also post it with the configured Slack credentials")
    test.add_argument("--config", default=None, help="config file (default: the one run uses)")
    test.add_argument("--json", action="store_true", help="print the message body as JSON only")
    test.set_defaults(func=_test)


def sample_alert(settings: Any, config_path: str | None) -> Any:
    """The sample alert, its runbook URL set as the agent sets it for this config."""
    from watchdog.model import Alert, AlertState
    from watchdog.runbooks.catalogue import catalogue_from_settings
    from watchdog.runbooks.links import with_runbook_urls

    now_ms = int(time.time() * 1000)
    node = settings.node or _hostname()
    alert = Alert(state=AlertState.FIRING, active_at_ms=now_ms - 60_000, fingerprint="notify-test", name=SAMPLE_ALERT,
                  labels={"alertname": SAMPLE_ALERT, "severity": "warning", "sensor": "gpu", "gpu": "3",
                          "uuid": "GPU-00000000-0000-0000-0000-000000000003", "node": node},
                  annotations={"summary": "GPU 3 is 3 °C below its thermal slowdown threshold (a test message)",
                               "description": "A test notification from `inference-watchdog notify test`: no GPU "
                                              "is hot. Real alerts look like this one.",
                               "runbook": "gpu-thermal-margin"},
                  value=3.0, fired_at_ms=now_ms - 30_000,
                  generator="min by (gpu, uuid) (watchdog_gpu_temperature_threshold_celsius) - "
                            "watchdog_gpu_temperature_celsius < 5")
    catalogue = catalogue_from_settings(settings.runbooks, config_path)
    return with_runbook_urls([alert], catalogue, settings.runbooks.url_base)[0], catalogue


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _test(args: argparse.Namespace) -> int:
    from watchdog.cli.common import checked_settings, config_path

    path = config_path(args.config)
    settings, lines = checked_settings(path, daemon=False)
    if settings is None:
        for line in lines:
            print(line, file=sys.stderr)
        return 2
    alert, catalogue = sample_alert(settings, path)
    node = settings.node or _hostname()
    if args.channel == "log":
        print(json.dumps({"level": "warning", "event": "alert_firing", "alertname": alert.name, "node": node,
                          "labels": alert.labels, "summary": alert.annotations["summary"],
                          "runbook_url": alert.annotations.get("runbook_url", "")}, ensure_ascii=False))
        return 0
    from watchdog.notify.channels.slack.blocks import Links, render_alert_message

    slack = settings.notifiers.slack
    runbook = catalogue.get("gpu-thermal-margin")
    body = render_alert_message([alert], [], node, Links(slack.grafana_url, slack.runbook_base_url),
                                runbook.title if runbook else "")
    if args.json:
        json.dump({"text": body.text, "blocks": body.blocks}, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print(f"Slack message (fallback text): {body.text}")
        print("Block Kit blocks (paste into https://app.slack.com/block-kit-builder to preview):")
        print(json.dumps(body.blocks, indent=2, ensure_ascii=False))
    if not args.send:
        return 0
    return _send(slack, body)


def _send(slack: Any, body: Any) -> int:
    from watchdog.config.settings import SlackMode
    from watchdog.infra.secrets import SecretError, read_secret

    if not slack.enabled:
        print("not sent: notifiers.slack.enabled is false in this config", file=sys.stderr)
        return 2
    try:
        if slack.mode is SlackMode.WEBHOOK:
            secret = read_secret(slack.webhook_url_env, slack.webhook_url_file)
        else:
            secret = read_secret(slack.token_env, slack.token_file)
    except SecretError as exc:
        print(f"not sent: {exc}", file=sys.stderr)
        return 2
    if not secret:
        what = "webhook URL" if slack.mode is SlackMode.WEBHOOK else "bot token"
        print(f"not sent: the Slack {what} is not set (see notifiers.slack in docs/notifications.md)", file=sys.stderr)
        return 2
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web import WebClient
    from slack_sdk.webhook import WebhookClient

    try:
        if slack.mode is SlackMode.WEBHOOK:
            answer = WebhookClient(secret, timeout=slack.timeout_seconds).send(text=body.text, blocks=body.blocks)
            if answer.status_code != 200:
                print(f"Slack refused the message: HTTP {answer.status_code} {answer.body}", file=sys.stderr)
                return 1
        else:
            client = WebClient(token=secret, base_url=slack.base_url, timeout=slack.timeout_seconds)
            client.chat_postMessage(channel=slack.channel, text=body.text, blocks=body.blocks)
    except SlackApiError as exc:
        print(f"Slack refused the message: {exc.response.get('error', exc)}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"could not reach Slack: {exc}", file=sys.stderr)
        return 1
    print(f"sent to {'the webhook' if slack.mode is SlackMode.WEBHOOK else slack.channel}")
    return 0
