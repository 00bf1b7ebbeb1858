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
(method, url, body, headers), ``signal`` (process selector + signal), ``notify`` (text only), and the
serving kinds that take an engine out of rotation and put it back (:mod:`watchdog.runbooks.serving_steps`)::

    - name: drain-engine
      drain: {job: "{{ labels.job }}", for: 2h}      # or {gpu: "{{ labels.gpu }}"}: every engine on that GPU
    - name: wait-idle
      wait_idle: {job: "{{ labels.job }}", timeout: 2m, on_timeout: continue}   # or escalate (the default)
    - name: canary
      canary: {job: "{{ labels.job }}", passes: 3, timeout: 10m}
    - name: readmit
      readmit: {job: "{{ labels.job }}"}

``drain``/``readmit`` set and clear the engine's manual serving state; ``wait_idle``/``canary`` are waits,
polled once per tick (never on a worker), that take only the ``auto`` and ``requires`` guards.
Diagnose steps are ``command`` or ``http`` with method GET and take no guards.

Contract: :func:`parse_step` either returns a fully validated :class:`Step` (every template parsed) or
raises :class:`StepError` naming the key path; :func:`render_action` turns a step's action into a
:class:`RenderedAction` of plain strings for one alert, or raises the templating errors.
"""

from __future__ import annotations

import json
import re
import signal as signal_module
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from watchdog.runbooks.templating import (
    LABEL_VALUE_RE,
    Template,
    TemplateContext,
    TemplateSyntaxError,
    parse_template,
    render,
    render_data,
)

ACTION_KINDS = ("command", "systemd", "http", "signal", "notify", "drain", "wait_idle", "canary", "readmit")
SERVING_KINDS = ("drain", "wait_idle", "canary", "readmit")
WAIT_KINDS = ("wait_idle", "canary")  # polled each tick instead of executed
ON_TIMEOUT = ("escalate", "continue")
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
DEFAULT_WAIT_IDLE_S = 300.0
DEFAULT_CANARY_S = 600.0
DEFAULT_CANARY_PASSES = 3
MAX_CANARY_PASSES = 100
MAX_WAIT_S = 86400.0

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


@dataclass(frozen=True)
class EngineTarget:
    """The engines a serving step acts on: one ``job`` (a template, usually ``{{ labels.job }}``), or
    every engine with a rank on ``gpu`` (resolved from ``watchdog_engine_gpu_info`` when rendered)."""

    job: Template | None = None
    gpu: Template | None = None


@dataclass(frozen=True)
class DrainAction:
    """Take the engines out of rotation: a manual ``drain`` state, until ``for_s`` (None: until readmitted)."""

    target: EngineTarget
    for_s: float | None = None
    kind: str = "drain"


@dataclass(frozen=True)
class WaitIdleAction:
    """Wait until the engines run no request (``engine:requests_running`` 0), at most ``wait_s``; then
    ``on_timeout``: ``escalate`` (stop, a human decides) or ``continue`` (the next step)."""

    target: EngineTarget
    wait_s: float = DEFAULT_WAIT_IDLE_S
    on_timeout: str = "escalate"
    kind: str = "wait_idle"


@dataclass(frozen=True)
class CanaryAction:
    """Wait for ``passes`` consecutive fresh canary probes of each engine within its TTFT and TPOT
    objectives, at most ``wait_s``; else escalate (the engines stay drained)."""

    target: EngineTarget
    passes: int = DEFAULT_CANARY_PASSES
    wait_s: float = DEFAULT_CANARY_S
    kind: str = "canary"


@dataclass(frozen=True)
class ReadmitAction:
    """Put the engines back in rotation: clear the drain this runbook set (never an operator's)."""

    target: EngineTarget
    kind: str = "readmit"


Action = (CommandAction | SystemdAction | HttpAction | SignalAction | NotifyAction | DrainAction | WaitIdleAction
          | CanaryAction | ReadmitAction)


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


def _parse_target(value: dict[str, Any], kind: str) -> EngineTarget:
    chosen = [k for k in ("job", "gpu") if value.get(k) is not None]
    if len(chosen) != 1:
        raise StepError(f"{kind}.job", "name the engine: exactly one of job (e.g. \"{{ labels.job }}\") or gpu "
                        "(every engine with a rank on that GPU)")
    key = chosen[0]
    template = _template(value[key], f"{kind}.{key}")
    if not template.source.strip():
        raise StepError(f"{kind}.{key}", "is empty")
    return EngineTarget(job=template) if key == "job" else EngineTarget(gpu=template)


def _serving_mapping(value: Any, kind: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise StepError(kind, f"expected a mapping such as {{job: \"{{{{ labels.job }}}}\"}} (keys: "
                        f"{', '.join(sorted(allowed))})")
    _only_keys(value, allowed, kind)
    return value


def _parse_wait_limit(value: dict[str, Any], kind: str, default: float) -> float:
    wait_s = parse_duration(value.get("timeout", default), f"{kind}.timeout")
    if not 0 < wait_s <= MAX_WAIT_S:
        raise StepError(f"{kind}.timeout", "must be between 0 and 1d")
    return wait_s


def _parse_drain(value: Any) -> DrainAction:
    raw = _serving_mapping(value, "drain", {"job", "gpu", "for"})
    for_s = None
    if raw.get("for") is not None:
        for_s = parse_duration(raw["for"], "drain.for")
        if not 0 < for_s <= 7 * 86400:
            raise StepError("drain.for", "must be between 0 and 7d (leave it out: until readmitted)")
    return DrainAction(_parse_target(raw, "drain"), for_s)


def _parse_wait_idle(value: Any) -> WaitIdleAction:
    raw = _serving_mapping(value, "wait_idle", {"job", "gpu", "timeout", "on_timeout"})
    on_timeout = raw.get("on_timeout", "escalate")
    if on_timeout not in ON_TIMEOUT:
        raise StepError("wait_idle.on_timeout", f"must be one of {', '.join(ON_TIMEOUT)}")
    return WaitIdleAction(_parse_target(raw, "wait_idle"), _parse_wait_limit(raw, "wait_idle", DEFAULT_WAIT_IDLE_S),
                          on_timeout)


def _parse_canary(value: Any) -> CanaryAction:
    raw = _serving_mapping(value, "canary", {"job", "gpu", "passes", "timeout"})
    passes = raw.get("passes", DEFAULT_CANARY_PASSES)
    if isinstance(passes, bool) or not isinstance(passes, int) or not 1 <= passes <= MAX_CANARY_PASSES:
        raise StepError("canary.passes", f"expected a whole number of probes from 1 to {MAX_CANARY_PASSES}")
    return CanaryAction(_parse_target(raw, "canary"), passes, _parse_wait_limit(raw, "canary", DEFAULT_CANARY_S))


def _parse_readmit(value: Any) -> ReadmitAction:
    return ReadmitAction(_parse_target(_serving_mapping(value, "readmit", {"job", "gpu"}), "readmit"))


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
        """The action kind: command, systemd, http, signal, notify, drain, wait_idle, canary or readmit."""
        return self.action.kind


GUARD_KEYS = {"auto", "cooldown", "max_per_day", "requires", "verify"}
WAIT_GUARD_KEYS = {"auto", "requires"}  # a wait acts on nothing: no cooldown, cap or verify of its own
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
    if kind in WAIT_KINDS:
        allowed = {"name", "description", kind} | WAIT_GUARD_KEYS
    else:
        allowed = COMMON_KEYS | {kind} | (set() if diagnose else GUARD_KEYS)
    unknown = sorted(set(raw) - allowed)
    if unknown:
        hint = ""
        if diagnose and unknown[0] in GUARD_KEYS:
            hint = " (diagnose steps take no guards)"
        elif kind in WAIT_KINDS and unknown[0] == "timeout":
            hint = f" (a {kind} step's limit is {kind}.timeout)"
        elif kind in WAIT_KINDS:
            hint = f" (a {kind} step only waits: it takes auto and requires)"
        raise StepError(unknown[0], f"unknown key{hint}")
    if diagnose and kind not in DIAGNOSE_KINDS:
        raise StepError(kind, "diagnose steps are read-only: command or http GET only")
    action: Action
    serving: dict[str, Callable[[Any], Action]] = {
        "drain": _parse_drain, "wait_idle": _parse_wait_idle, "canary": _parse_canary, "readmit": _parse_readmit}
    if kind in serving:
        action = serving[kind](raw[kind])
    elif kind == "command":
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

    Serving actions use ``jobs`` (the engines; empty while a ``gpu`` target is unresolved, offline),
    ``gpu``, and: drain ``text`` (the reason), ``set_by`` (the owner, ``runbook:<id>``), ``until_s``;
    readmit ``set_by``; wait_idle ``wait_s`` and ``on_timeout``; canary ``wait_s`` and ``passes``.
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
    jobs: tuple[str, ...] = ()
    gpu: str = ""
    set_by: str = ""
    until_s: float | None = None
    wait_s: float = 0.0
    passes: int = 0
    on_timeout: str = ""

    @property
    def key(self) -> str:
        """The target identity used by cooldown and max_per_day."""
        if self.kind in SERVING_KINDS:
            return f"{self.kind}:" + (",".join(self.jobs) if self.jobs else f"gpu={self.gpu}")
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
        if self.kind in SERVING_KINDS:
            return self._serving_display()
        return self.text

    def _serving_display(self) -> str:
        if self.jobs:
            jobs = [_shell_quote(j) for j in self.jobs]
            lookup = ""
        else:  # a gpu: target not resolved here (offline): how to list its engines, then JOB stands for each
            jobs = ["JOB"]
            engines = f'max by (job) (max_over_time(watchdog_engine_gpu_info{{gpu="{self.gpu}"}}[15m]))'
            lookup = f"for each JOB of {_query(engines)}: "
        if self.kind == "drain":
            until = f" --for {format_duration(self.until_s)}" if self.until_s else ""
            return lookup + " ; ".join(f"inference-watchdog engine drain {j} --reason {_shell_quote(self.text)}{until}"
                                       for j in jobs)
        if self.kind == "readmit":
            return lookup + " ; ".join(f"inference-watchdog engine admit {j}" for j in jobs)
        limit = format_duration(self.wait_s)
        selectors = [f'job="{j}"' for j in self.jobs] or ['job="JOB"']
        if self.kind == "wait_idle":
            then = "escalate" if self.on_timeout == "escalate" else "go on"
            checks = " ; ".join(_query(f"sum(engine:requests_running{{{sel}}})") for sel in selectors)
            return f"{lookup}wait until it shows 0: {checks} (at most {limit}, then {then})"
        checks = " ; ".join(_query(f"watchdog_engine_probe_success{{{sel}}}") for sel in selectors)
        return (f"{lookup}wait for {self.passes} consecutive fresh canary probes within the TTFT/TPOT objectives: "
                f"{checks} (at most {limit}, else escalate and stay drained)")


def _query(expr: str) -> str:
    return f"inference-watchdog query {_shell_quote(expr)}"


def _shell_quote(arg: str) -> str:
    if arg and re.fullmatch(r"[A-Za-z0-9_./:=,@%+-]+", arg):
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


EnginesOnGpu = Callable[[str], Sequence[str]]
"""``gpu index -> jobs of the engines with a rank on it``: how a ``gpu:`` target is resolved."""


class NoEngine(LookupError):
    """A ``gpu:`` target on which no engine is known to run: nothing to act on (the step is skipped)."""


def render_action(action: Action, ctx: TemplateContext, *, engines_on_gpu: EnginesOnGpu | None = None,
                  origin: str = "", set_by: str = "") -> RenderedAction:
    """Resolve ``action`` for one alert; raises TemplateMissing/TemplateRefused (or StepError for a
    rendered unit name that is not a unit, or an engine job that is not a label value; NoEngine for a GPU
    no engine runs on). A serving action's ``gpu:`` target becomes the jobs ``engines_on_gpu`` returns;
    without a resolver (offline) it stays symbolic (``jobs`` empty, ``gpu`` set) and cannot execute.
    ``origin`` is the drain reason (``runbook X step Y for ALERT``), ``set_by`` its owner (``runbook:X``)."""
    if isinstance(action, (DrainAction, WaitIdleAction, CanaryAction, ReadmitAction)):
        return _render_serving(action, ctx, engines_on_gpu, origin, set_by)
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


def _render_serving(action: DrainAction | WaitIdleAction | CanaryAction | ReadmitAction, ctx: TemplateContext,
                    engines_on_gpu: EnginesOnGpu | None, origin: str, set_by: str) -> RenderedAction:
    jobs: tuple[str, ...] = ()
    gpu = ""
    if action.target.job is not None:
        jobs = (_job(render(action.target.job, ctx)),)
    else:
        assert action.target.gpu is not None
        gpu = render(action.target.gpu, ctx)
        if engines_on_gpu is not None:
            jobs = tuple(sorted({_job(j) for j in engines_on_gpu(gpu)}))
            if not jobs:
                raise NoEngine(f"no engine is known to have a rank on GPU {gpu} (watchdog_engine_gpu_info, "
                               "last 15 minutes): nothing to act on")
    common: dict[str, Any] = {"jobs": jobs, "gpu": gpu}
    if isinstance(action, DrainAction):
        return RenderedAction("drain", text=origin or "runbook drain", set_by=set_by or "runbook",
                              until_s=action.for_s, **common)
    if isinstance(action, WaitIdleAction):
        return RenderedAction("wait_idle", wait_s=action.wait_s, on_timeout=action.on_timeout, **common)
    if isinstance(action, CanaryAction):
        return RenderedAction("canary", wait_s=action.wait_s, passes=action.passes, **common)
    return RenderedAction("readmit", set_by=set_by or "runbook", **common)


def _job(name: str) -> str:
    if not LABEL_VALUE_RE.fullmatch(name) or len(name) > 128:
        raise StepError("job", f"{name[:80]!r} is not an engine job name (a label value)")
    return name


def _unit(name: str) -> str:
    if not UNIT_RE.fullmatch(name) or name.startswith("-"):
        raise StepError("unit", f"{name!r} is not a systemd unit name (e.g. vllm.service)")
    return name


def signal_number(name: str) -> int:
    """The numeric value of one of :data:`SIGNALS`."""
    return int(getattr(signal_module, name))
