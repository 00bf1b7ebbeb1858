"""The step model: typed actions and guards, parsed from runbook YAML and rendered for one alert.

A step is one action with typed parameters plus guards::

    - name: restart-engine
      description: Restart the engine's systemd unit.
      systemd: {unit: "{{ config.engines[job].unit }}", verb: restart}
      auto: false
      cooldown: 30m
      max_per_day: 3
      requires: 'engine:requests_running{job="{{ labels.job }}"} == 0'
      verify: {expr: 'up{job="{{ labels.job }}"} == 1', timeout: 5m}
      timeout: 120s

Action kinds: ``command`` (argv list, never a shell string), ``systemd`` (unit + verb), ``http``
(method, url, body, headers), ``signal`` (process selector + signal), ``notify`` (text only).
Diagnose steps are ``command`` or ``http`` with method GET and take no guards.

Contract: :func:`parse_step` either returns a fully validated :class:`Step` (every template parsed) or
raises :class:`StepError` naming the key path; :func:`render_action` turns a step's action into a
:class:`RenderedAction` of plain strings for one alert, or raises the templating errors.
"""

from __future__ import annotations

import json
import re
import signal as signal_module
from dataclasses import dataclass, field
from typing import Any

from watchdog.runbooks.templating import (
    Template,
    TemplateContext,
    TemplateSyntaxError,
    parse_template,
    render,
    render_data,
)

ACTION_KINDS = ("command", "systemd", "http", "signal", "notify")
DIAGNOSE_KINDS = ("command", "http")
SYSTEMD_VERBS = ("restart", "try-restart", "reload", "reload-or-restart", "start", "stop", "reset-failed")
HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGKILL")
STEP_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
UNIT_RE = re.compile(r"[A-Za-z0-9_:.@\\-]+\.(service|socket|target|timer|scope|slice|path|mount)")
HEADER_NAME_RE = re.compile(r"[A-Za-z0-9-]{1,64}")

DEFAULT_STEP_TIMEOUT_S = 30.0
DEFAULT_SYSTEMD_TIMEOUT_S = 120.0
DEFAULT_VERIFY_TIMEOUT_S = 300.0
MAX_TIMEOUT_S = 3600.0

_DURATION_RE = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?")


class StepError(ValueError):
    """A step that fails validation; ``key_path`` is relative to the step (``verify.timeout``)."""

    def __init__(self, key_path: str, problem: str) -> None:
        self.key_path, self.problem = key_path, problem
        super().__init__(f"{key_path}: {problem}" if key_path else problem)


def parse_duration(value: Any, key: str) -> float:
    """Seconds from ``30s``, ``5m``, ``1h30m``, ``1d`` or a plain number of seconds."""
    if isinstance(value, bool):
        raise StepError(key, f"expected a duration like 30s or 5m, got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise StepError(key, "a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        match = _DURATION_RE.fullmatch(value.strip())
        if match and any(match.groups()):
            d, h, m, s, ms = (int(g) if g else 0 for g in match.groups())
            return d * 86400 + h * 3600 + m * 60 + s + ms / 1000
    raise StepError(key, f"expected a duration like 30s, 5m or 1h, got {value!r}")


def format_duration(seconds: float) -> str:
    """``90`` → ``1m30s``; whole units only, for messages."""
    total = round(seconds)
    if total == 0:
        return "0s"
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            out += f"{total // size}{unit}"
            total %= size
    return out


def _template(value: Any, key: str) -> Template:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise StepError(key, f"expected a string, got {type(value).__name__}")
    try:
        return parse_template(str(value))
    except TemplateSyntaxError as exc:
        raise StepError(key, str(exc)) from exc


def _template_tree(value: Any, key: str) -> Any:
    """A JSON-like body whose string leaves become templates."""
    if isinstance(value, str):
        return _template(value, key)
    if isinstance(value, dict):
        return {str(k): _template_tree(v, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_template_tree(v, f"{key}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise StepError(key, f"unsupported value of type {type(value).__name__}")


# -- actions ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandAction:
    """Run ``argv`` directly (no shell); each element is one template."""

    argv: tuple[Template, ...]
    kind: str = "command"


@dataclass(frozen=True)
class SystemdAction:
    """``systemctl <verb> <unit>``."""

    unit: Template
    verb: str
    kind: str = "systemd"


@dataclass(frozen=True)
class HttpAction:
    """One HTTP request; ``body`` (JSON) and ``headers`` hold templates at their string leaves."""

    method: str
    url: Template
    body: Any = None
    headers: tuple[tuple[str, Template], ...] = ()
    kind: str = "http"


@dataclass(frozen=True)
class SignalAction:
    """Send ``signal`` to the main process of systemd ``unit``."""

    unit: Template
    signal: str
    kind: str = "signal"


@dataclass(frozen=True)
class NotifyAction:
    """Post ``text`` into the alert's thread; nothing is executed."""

    text: Template
    kind: str = "notify"


Action = CommandAction | SystemdAction | HttpAction | SignalAction | NotifyAction


def _parse_command(value: Any) -> CommandAction:
    if isinstance(value, str):
        raise StepError("command", "must be an argv list such as [nvidia-smi, -q], never a shell string")
    if not isinstance(value, list) or not value:
        raise StepError("command", "must be a non-empty argv list")
    argv = tuple(_template(item, f"command[{i}]") for i, item in enumerate(value))
    if not argv[0].is_literal:
        raise StepError("command[0]", "the program must be literal, not templated")
    if not argv[0].source or argv[0].source.startswith("-"):
        raise StepError("command[0]", "the program must be a name or an absolute path")
    return CommandAction(argv)


def _parse_systemd(value: Any) -> SystemdAction:
    if not isinstance(value, dict):
        raise StepError("systemd", "expected a mapping {unit: ..., verb: ...}")
    _only_keys(value, {"unit", "verb"}, "systemd")
    verb = value.get("verb", "restart")
    if verb not in SYSTEMD_VERBS:
        raise StepError("systemd.verb", f"must be one of {', '.join(SYSTEMD_VERBS)}")
    if "unit" not in value:
        raise StepError("systemd.unit", "is required")
    return SystemdAction(_template(value["unit"], "systemd.unit"), verb)


def _parse_http(value: Any, diagnose: bool) -> HttpAction:
    if not isinstance(value, dict):
        raise StepError("http", "expected a mapping {method: ..., url: ..., body: ...}")
    _only_keys(value, {"method", "url", "body", "headers"}, "http")
    method = str(value.get("method", "GET")).upper()
    if method not in HTTP_METHODS:
        raise StepError("http.method", f"must be one of {', '.join(HTTP_METHODS)}")
    if diagnose and method != "GET":
        raise StepError("http.method", "diagnose steps are read-only: only GET")
    if "url" not in value:
        raise StepError("http.url", "is required")
    url = _template(value["url"], "http.url")
    if not url.source.startswith(("http://", "https://", "{{")):
        raise StepError("http.url", "must be an http:// or https:// URL")
    body = _template_tree(value["body"], "http.body") if value.get("body") is not None else None
    if body is not None and method == "GET":
        raise StepError("http.body", "a GET request has no body")
    headers_raw = value.get("headers") or {}
    if not isinstance(headers_raw, dict):
        raise StepError("http.headers", "expected a mapping of header name to value")
    headers = []
    for name, header_value in sorted(headers_raw.items()):
        if not HEADER_NAME_RE.fullmatch(str(name)):
            raise StepError(f"http.headers.{name}", "invalid header name")
        headers.append((str(name), _template(header_value, f"http.headers.{name}")))
    return HttpAction(method, url, body, tuple(headers))


def _parse_signal(value: Any) -> SignalAction:
    if not isinstance(value, dict):
        raise StepError("signal", "expected a mapping {unit: ..., signal: ...}")
    _only_keys(value, {"unit", "signal"}, "signal")
    if "unit" not in value:
        raise StepError("signal.unit", "is required (the process is the unit's main PID)")
    name = str(value.get("signal", "SIGTERM")).upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    if name not in SIGNALS:
        raise StepError("signal.signal", f"must be one of {', '.join(SIGNALS)}")
    return SignalAction(_template(value["unit"], "signal.unit"), name)


def _parse_notify(value: Any) -> NotifyAction:
    if isinstance(value, dict):
        _only_keys(value, {"text"}, "notify")
        value = value.get("text")
    if not isinstance(value, str) or not value.strip():
        raise StepError("notify", "expected the text to post")
    return NotifyAction(_template(value, "notify"))


def _only_keys(mapping: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise StepError(f"{where}.{unknown[0]}", f"unknown key (allowed: {', '.join(sorted(allowed))})")


# -- guards and steps -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verify:
    """A PromQL condition that must hold within ``timeout_s`` after the step ran, else escalate."""

    expr: Template
    timeout_s: float = DEFAULT_VERIFY_TIMEOUT_S


@dataclass(frozen=True)
class Guards:
    """When a step may run: ``auto`` (without a human), spacing, daily cap, pre- and post-conditions."""

    auto: bool = False
    cooldown_s: float = 0.0
    max_per_day: int | None = None
    requires: Template | None = None
    verify: Verify | None = None


@dataclass(frozen=True)
class Step:
    """One runbook step: a named action with guards; ``timeout_s`` bounds its execution."""

    name: str
    action: Action
    guards: Guards = field(default_factory=Guards)
    description: str = ""
    timeout_s: float = DEFAULT_STEP_TIMEOUT_S

    @property
    def kind(self) -> str:
        """The action kind: command, systemd, http, signal or notify."""
        return self.action.kind


GUARD_KEYS = {"auto", "cooldown", "max_per_day", "requires", "verify"}
COMMON_KEYS = {"name", "description", "timeout"}


def parse_step(raw: Any, *, diagnose: bool) -> Step:
    """A validated :class:`Step` from its YAML mapping; ``diagnose`` steps are read-only, no guards."""
    if not isinstance(raw, dict):
        raise StepError("", "a step must be a mapping with a name and one action")
    name = raw.get("name")
    if not isinstance(name, str) or not STEP_NAME_RE.fullmatch(name):
        raise StepError("name", "required: lowercase letters, digits and '-' (e.g. restart-engine)")
    kinds = [k for k in ACTION_KINDS if k in raw]
    if len(kinds) != 1:
        raise StepError("", f"a step needs exactly one action of {', '.join(ACTION_KINDS)}; found {kinds}")
    kind = kinds[0]
    allowed = COMMON_KEYS | {kind} | (set() if diagnose else GUARD_KEYS)
    unknown = sorted(set(raw) - allowed)
    if unknown:
        hint = " (diagnose steps take no guards)" if diagnose and unknown[0] in GUARD_KEYS else ""
        raise StepError(unknown[0], f"unknown key{hint}")
    if diagnose and kind not in DIAGNOSE_KINDS:
        raise StepError(kind, "diagnose steps are read-only: command or http GET only")
    action: Action
    if kind == "command":
        action = _parse_command(raw[kind])
    elif kind == "systemd":
        action = _parse_systemd(raw[kind])
    elif kind == "http":
        action = _parse_http(raw[kind], diagnose)
    elif kind == "signal":
        action = _parse_signal(raw[kind])
    else:
        action = _parse_notify(raw[kind])
    default_timeout = DEFAULT_SYSTEMD_TIMEOUT_S if kind == "systemd" else DEFAULT_STEP_TIMEOUT_S
    timeout_s = parse_duration(raw.get("timeout", default_timeout), "timeout")
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise StepError("timeout", f"must be between 0 and {format_duration(MAX_TIMEOUT_S)}")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise StepError("description", "expected text")
    return Step(name, action, _parse_guards(raw), description.strip(), timeout_s)


def _parse_guards(raw: dict[str, Any]) -> Guards:
    auto = raw.get("auto", False)
    if not isinstance(auto, bool):
        raise StepError("auto", "expected true or false")
    cooldown_s = parse_duration(raw.get("cooldown", 0), "cooldown")
    max_per_day = raw.get("max_per_day")
    if max_per_day is not None and (isinstance(max_per_day, bool) or not isinstance(max_per_day, int)
                                    or max_per_day < 1):
        raise StepError("max_per_day", "expected a positive integer")
    requires = _template(raw["requires"], "requires") if raw.get("requires") is not None else None
    verify = None
    if raw.get("verify") is not None:
        spec = raw["verify"]
        if isinstance(spec, str):
            spec = {"expr": spec}
        if not isinstance(spec, dict) or "expr" not in spec:
            raise StepError("verify", "expected {expr: PROMQL, timeout: 5m}")
        _only_keys(spec, {"expr", "timeout"}, "verify")
        timeout = parse_duration(spec.get("timeout", DEFAULT_VERIFY_TIMEOUT_S), "verify.timeout")
        if not 0 < timeout <= 86400:
            raise StepError("verify.timeout", "must be between 0 and 1d")
        verify = Verify(_template(spec["expr"], "verify.expr"), timeout)
    if raw.get("notify") is not None and (requires or verify):
        raise StepError("verify" if verify else "requires", "a notify step has nothing to verify")
    return Guards(auto, cooldown_s, max_per_day, requires, verify)


# -- rendering --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderedAction:
    """A step's action with every template resolved: what would run, as plain data.

    ``key`` identifies the target for cooldowns and daily caps (the same unit restarted from two
    runbooks shares one budget); ``display`` is the human form shown in suggestions.
    """

    kind: str
    argv: tuple[str, ...] = ()
    unit: str = ""
    verb: str = ""
    method: str = ""
    url: str = ""
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    signal: str = ""
    text: str = ""

    @property
    def key(self) -> str:
        """The target identity used by cooldown and max_per_day."""
        if self.kind == "command":
            return "command:" + json.dumps(list(self.argv))
        if self.kind == "systemd":
            return f"systemd:{self.verb}:{self.unit}"
        if self.kind == "http":
            return f"http:{self.method}:{self.url}"
        if self.kind == "signal":
            return f"signal:{self.signal}:{self.unit}"
        return "notify"

    @property
    def display(self) -> str:
        """One line a human can read (and, for commands, paste)."""
        if self.kind == "command":
            return " ".join(_shell_quote(a) for a in self.argv)
        if self.kind == "systemd":
            return f"systemctl {self.verb} {self.unit}"
        if self.kind == "http":
            body = f" {self.body.decode('utf-8', 'replace')}" if self.body else ""
            return f"{self.method} {self.url}{body}"
        if self.kind == "signal":
            return f"kill -s {self.signal[3:]} <MainPID of {self.unit}>"
        return self.text


def _shell_quote(arg: str) -> str:
    if arg and re.fullmatch(r"[A-Za-z0-9_./:=,@%+-]+", arg):
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


def render_action(action: Action, ctx: TemplateContext) -> RenderedAction:
    """Resolve ``action`` for one alert; raises TemplateMissing/TemplateRefused (or StepError for a
    rendered unit name that is not a unit)."""
    if isinstance(action, CommandAction):
        return RenderedAction("command", argv=tuple(render(t, ctx) for t in action.argv))
    if isinstance(action, SystemdAction):
        return RenderedAction("systemd", unit=_unit(render(action.unit, ctx)), verb=action.verb)
    if isinstance(action, HttpAction):
        body = None
        if action.body is not None:
            body = json.dumps(render_data(action.body, ctx), sort_keys=True).encode()
        headers = tuple((name, render(value, ctx)) for name, value in action.headers)
        return RenderedAction("http", method=action.method, url=render(action.url, ctx, url=True),
                              body=body, headers=headers)
    if isinstance(action, SignalAction):
        return RenderedAction("signal", unit=_unit(render(action.unit, ctx)), signal=action.signal)
    return RenderedAction("notify", text=render(action.text, ctx))


def _unit(name: str) -> str:
    if not UNIT_RE.fullmatch(name) or name.startswith("-"):
        raise StepError("unit", f"{name!r} is not a systemd unit name (e.g. vllm.service)")
    return name


def signal_number(name: str) -> int:
    """The numeric value of one of :data:`SIGNALS`."""
    return int(getattr(signal_module, name))
