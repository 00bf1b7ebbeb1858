"""Typed, frozen settings built once from the validated config document.

Contract:
- The JSON Schema (``watchdog/config/schema/*.json``) is the only source of defaults: :func:`load_config`
  fills them in, and the dataclasses here declare no default values. A field that is neither in the
  document nor optional (``X | None``) is a bug in the schema and raises :class:`SettingsError`.
- Every component receives only its own section (``settings.notifiers.slack``, ``settings.remediation``);
  nothing downstream reads the raw dict.
- Closed vocabularies are enums (:class:`RemediationMode`, :class:`EngineKind`...); lists are tuples and
  mappings are read-only, so a settings object can be shared between threads and compared with ``==``
  (a reload compares old and new sections to decide what changed).
- :func:`section_settings` builds one section from a partial document with the schema's defaults for that
  section applied (tests and the demo use it instead of repeating defaults).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, Union

from watchdog.config.loader import apply_section_defaults


class SettingsError(Exception):
    """A validated document that does not fit the settings types (a schema/settings mismatch)."""


class RemediationMode(str, enum.Enum):
    """``remediation.mode``: who may run a remediation step."""

    OFF = "off"
    SUGGEST = "suggest"
    APPROVE = "approve"
    AUTO = "auto"


class EngineKind(str, enum.Enum):
    """``engines[].kind``: which engine serves an endpoint (``auto`` detects it from metric prefixes)."""

    AUTO = "auto"
    VLLM = "vllm"
    SGLANG = "sglang"


class LogFormat(str, enum.Enum):
    """``notifiers.log.format``."""

    AUTO = "auto"
    JSON = "json"
    TEXT = "text"


class SlackMode(str, enum.Enum):
    """``notifiers.slack.mode``: the Web API with a bot token, or an incoming webhook."""

    BOT = "bot"
    WEBHOOK = "webhook"


# -- collectors ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NvmlSettings:
    """``collectors.nvml``."""

    enabled: bool
    timeout_seconds: float
    nvlink: bool
    processes: bool
    counters_interval_seconds: float
    static_refresh_seconds: float
    init_backoff_max_seconds: float
    expected_gpus: int | None
    sysfs_root: str | None
    modules_root: str | None


@dataclasses.dataclass(frozen=True)
class HostSettings:
    """``collectors.host``."""

    enabled: bool
    timeout_seconds: float
    interval_seconds: float
    per_cpu: bool
    cpu_modes: tuple[str, ...]
    proc_path: str


@dataclasses.dataclass(frozen=True)
class CollectorsSettings:
    """``collectors``."""

    nvml: NvmlSettings
    host: HostSettings


@dataclasses.dataclass(frozen=True)
class KmsgSettings:
    """``kmsg``."""

    enabled: bool
    source: str
    timeout_seconds: float
    reboot_escalation_threshold: int


@dataclasses.dataclass(frozen=True)
class ProcessesSettings:
    """``processes``."""

    enabled: bool
    timeout_seconds: float
    sysfs_root: str


@dataclasses.dataclass(frozen=True)
class PodResourcesSettings:
    """``pod_resources``: which pod holds which GPU and runs which engine (docs/pod-resources.md)."""

    enabled: bool
    required: bool
    pod_labels: bool
    socket: str
    refresh_seconds: float
    timeout_seconds: float
    proc_root: str
    container_logs_dir: str


@dataclasses.dataclass(frozen=True)
class EngineProcessSettings:
    """``engines[].process``: how to find an engine's process."""

    match: str | None
    port: int | None


@dataclasses.dataclass(frozen=True)
class ModelSloSettings:
    """``engines[].models[]``: one model's SLO targets (unset targets fall back to ``slo``)."""

    model: str
    ttft_seconds: float | None
    tpot_seconds: float | None
    e2e_seconds: float | None
    objective: float | None


@dataclasses.dataclass(frozen=True)
class EngineProbeSettings:
    """``engines[].probe``: the canary probe (docs/probes.md)."""

    url: str
    model: str
    prompt: str
    max_tokens: int
    seed: int
    interval_seconds: float
    timeout_seconds: float
    ttft_slo_seconds: float
    tpot_slo_seconds: float


@dataclasses.dataclass(frozen=True)
class EngineLogSettings:
    """``engines[].log``: the engine's log file or systemd unit (docs/engine-logs.md)."""

    file: str | None
    unit: str | None


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """``engines[]``: one scraped endpoint."""

    url: str
    job: str
    labels: Mapping[str, str]
    kind: EngineKind
    scrape_timeout_seconds: float
    max_payload_bytes: int
    unit: str
    process: EngineProcessSettings
    models: tuple[ModelSloSettings, ...]
    probe: EngineProbeSettings | None
    log: EngineLogSettings | None


@dataclasses.dataclass(frozen=True)
class ForecastSettings:
    """``forecast``: the KV exhaustion forecast (docs/forecast.md)."""

    kv_exhaustion_horizon_seconds: float


@dataclasses.dataclass(frozen=True)
class SloSettings:
    """``slo``: defaults for the per-model SLOs."""

    objective: float
    ttft_seconds: float | None
    tpot_seconds: float | None
    e2e_seconds: float | None


# -- rules, runbooks, remediation ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RulesSettings:
    """``rules``."""

    paths: tuple[str, ...]
    rule_timeout_seconds: float
    max_samples: int


@dataclasses.dataclass(frozen=True)
class RunbooksSettings:
    """``runbooks``."""

    paths: tuple[str, ...]
    url_base: str


@dataclasses.dataclass(frozen=True)
class AllowSettings:
    """``remediation.allow``: what remediation steps may touch."""

    units: tuple[str, ...]
    commands: tuple[str, ...]
    urls: tuple[str, ...]
    engines: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class SecretSource:
    """``remediation.secret_vars.NAME``: an environment variable or a file (exactly one is set)."""

    env: str | None
    file: str | None


@dataclasses.dataclass(frozen=True)
class DiagnosticsSettings:
    """``remediation.diagnostics``."""

    enabled: bool
    simulated: bool
    timeout_seconds: float
    max_output_bytes: int
    commands: tuple[str, ...]
    urls: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class RemediationSettings:
    """``remediation``: the node's policy for runbook steps."""

    mode: RemediationMode
    dry_run: bool
    allow: AllowSettings
    approvers: tuple[str, ...]
    max_attempts_before_escalation: int
    escalation_window_seconds: float
    max_output_bytes: int
    workers: int
    vars: Mapping[str, str]
    secret_vars: Mapping[str, SecretSource]
    diagnostics: DiagnosticsSettings


# -- notifiers ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LogNotifierSettings:
    """``notifiers.log``."""

    enabled: bool
    format: LogFormat


@dataclasses.dataclass(frozen=True)
class SlackSettings:
    """``notifiers.slack``."""

    enabled: bool
    mode: SlackMode
    token_env: str
    token_file: str
    webhook_url_env: str
    webhook_url_file: str
    app_token_env: str
    app_token_file: str
    channel: str
    base_url: str
    timeout_seconds: int
    rate_limit_max_wait_seconds: float
    approvers: tuple[str, ...]
    grafana_url: str
    runbook_base_url: str
    max_members_listed: int
    diagnostics_max_chars: int
    broadcast_resolved: bool
    honor_alertmanager_silences: bool


@dataclasses.dataclass(frozen=True)
class AlertmanagerSettings:
    """``notifiers.alertmanager``."""

    enabled: bool
    urls: tuple[str, ...]
    resend_interval_seconds: float
    timeout_seconds: float
    generator_url: str
    silences_refresh_seconds: float


@dataclasses.dataclass(frozen=True)
class GroupingSettings:
    """``notifiers.grouping``."""

    enabled: bool
    member_labels: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class OutboxSettings:
    """``notifiers.outbox``."""

    initial_backoff_seconds: float
    max_backoff_seconds: float
    poll_interval_seconds: float
    failing_alert_after_seconds: float
    keep_delivered_days: float


@dataclasses.dataclass(frozen=True)
class InhibitRuleSettings:
    """``notifiers.inhibit_rules[]``: Alertmanager's inhibit rule (matchers as amtool writes them)."""

    source_matchers: tuple[str, ...]
    target_matchers: tuple[str, ...]
    equal: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class NotifiersSettings:
    """``notifiers``."""

    log: LogNotifierSettings
    slack: SlackSettings
    alertmanager: AlertmanagerSettings
    grouping: GroupingSettings
    outbox: OutboxSettings
    inhibit_rules: tuple[InhibitRuleSettings, ...]


# -- exporter -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TlsSettings:
    """``exporter.tls``."""

    cert_file: str
    key_file: str
    client_ca_file: str
    min_version: str


@dataclasses.dataclass(frozen=True)
class BasicAuthSettings:
    """``exporter.basic_auth``."""

    username: str
    password_env: str
    password_file: str


@dataclasses.dataclass(frozen=True)
class ExporterSettings:
    """``exporter``."""

    web_config_file: str
    tls: TlsSettings
    basic_auth: BasicAuthSettings
    max_series_per_metric: int
    max_series_per_job: int
    pass_through_engine_series: bool
    dcgm_compatible: bool


# -- kubernetes ---------------------------------------------------------------------------------------


class NodeActionsMode(str, enum.Enum):
    """``kubernetes.node_actions``: whether the agent sets its Node's condition and taint itself."""

    OFF = "off"
    SUGGEST = "suggest"
    EXECUTE = "execute"


@dataclasses.dataclass(frozen=True)
class KubernetesSettings:
    """``kubernetes``: the Node condition and taint for node-unfit GPU faults (docs/kubernetes.md)."""

    node_actions: NodeActionsMode
    node_name: str
    node_name_env: str
    condition_type: str
    taint: bool
    taint_key: str
    clear_after_seconds: float
    max_writes_per_hour: int
    api_timeout_seconds: float


# -- serving verdicts ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DrainGuardSettings:
    """``serving.drain_guard``: what keeps non-fatal drains from taking out the node's capacity."""

    max_drained_share: float
    check_capacity: bool


# -- serving: the balancer interfaces (keys of their own in schema/61-serving-balancer.json) ------------


@dataclasses.dataclass(frozen=True)
class AgentCheckSettings:
    """``serving.agent_check``: HAProxy's agent-check port."""

    enabled: bool
    listen: str
    max_connections: int


@dataclasses.dataclass(frozen=True)
class ServingSettings:
    """``serving``: the verdict engine's thresholds (docs/routing.md). Band edges are checked here: each
    leave ratio above its enter ratio, the shed band below the short-only band."""

    short_only_enter_free_ratio: float
    short_only_leave_free_ratio: float
    shed_enter_free_ratio: float
    shed_leave_free_ratio: float
    short_prompt_max_tokens: int
    predicted_wait_enter_ratio: float
    predicted_wait_leave_ratio: float
    stale_after_intervals: float
    readings_to_change: int
    readings_window: int
    min_seconds_in_state: float
    short_only_weight_percent: int
    degraded_weight_percent: int
    degraded_min_burn_rate: float
    drain_guard: DrainGuardSettings
    agent_check: AgentCheckSettings

    def __post_init__(self) -> None:
        pairs = (("shed_leave_free_ratio", self.shed_leave_free_ratio, "shed_enter_free_ratio",
                  self.shed_enter_free_ratio),
                 ("short_only_enter_free_ratio", self.short_only_enter_free_ratio, "shed_leave_free_ratio",
                  self.shed_leave_free_ratio),
                 ("short_only_leave_free_ratio", self.short_only_leave_free_ratio, "short_only_enter_free_ratio",
                  self.short_only_enter_free_ratio),
                 ("predicted_wait_enter_ratio", self.predicted_wait_enter_ratio, "predicted_wait_leave_ratio",
                  self.predicted_wait_leave_ratio))
        for high_key, high, low_key, low in pairs:
            if high < low:
                raise SettingsError(f"serving.{high_key}: {high} is below serving.{low_key} ({low}); the bands "
                                    "need enter and leave thresholds apart in that order")
        if self.readings_to_change > self.readings_window:
            raise SettingsError(f"serving.readings_to_change: {self.readings_to_change} is more than "
                                f"serving.readings_window ({self.readings_window})")


# -- the whole file -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    """The whole config file, typed. ``node`` is empty when unset (the agent uses the hostname)."""

    node: str
    tick_interval_seconds: float
    engine_scrape_interval_seconds: float
    retention_seconds: float
    max_series: int
    max_series_per_source: int
    max_label_values_per_metric: int
    reserved_series: int
    state_dir: str
    listen: str
    rules: RulesSettings
    collectors: CollectorsSettings
    kmsg: KmsgSettings
    processes: ProcessesSettings
    pod_resources: PodResourcesSettings
    engines: tuple[EngineSettings, ...]
    slo: SloSettings
    forecast: ForecastSettings
    notifiers: NotifiersSettings
    remediation: RemediationSettings
    runbooks: RunbooksSettings
    exporter: ExporterSettings
    kubernetes: KubernetesSettings
    serving: ServingSettings


T = TypeVar("T")


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _convert(tp: Any, value: Any, where: str) -> Any:
    """``value`` (from the validated document) as type ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _convert(args[0], value, where)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise SettingsError(f"{where}: expected a mapping, got {type(value).__name__}")
        return build_settings(tp, value, where)
    if origin is tuple:
        item_type = typing.get_args(tp)[0]
        return tuple(_convert(item_type, item, f"{where}[{i}]") for i, item in enumerate(value))
    if origin is Mapping:
        value_type = typing.get_args(tp)[1]
        return types.MappingProxyType({str(k): _convert(value_type, v, f"{where}.{k}") for k, v in value.items()})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if tp is float:
        return float(value)
    if tp is int:
        return int(value)
    if tp is bool:
        return bool(value)
    if tp is str:
        return str(value)
    raise SettingsError(f"{where}: unsupported settings type {tp!r}")


def build_settings(cls: type[T], document: Mapping[str, Any], where: str = "") -> T:
    """An instance of the settings dataclass ``cls`` from a defaulted document section."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        tp = _hints(cls)[f.name]
        path = f"{where}.{f.name}" if where else f.name
        if f.name not in document:
            if type(None) in typing.get_args(tp):
                values[f.name] = None
                continue
            raise SettingsError(f"{path}: missing from the document and not optional (no schema default?)")
        values[f.name] = _convert(tp, document[f.name], path)
    return cls(**values)


def settings_from_config(config: Mapping[str, Any]) -> Settings:
    """The typed settings of a document returned by :func:`watchdog.config.load_config`."""
    return build_settings(Settings, config)


def section_settings(cls: type[T], key_path: str, partial: Mapping[str, Any] | None = None) -> T:
    """One section (``"notifiers.slack"``, ``"engines[]"``) from ``partial`` plus the schema's defaults."""
    return build_settings(cls, apply_section_defaults(key_path, dict(partial or {})), key_path)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def settings_document(settings: Settings) -> dict[str, Any]:
    """The settings as a plain document (dicts, lists, strings and numbers; unset optional keys are
    None): what runbook templates read with ``{{ config.PATH }}``."""
    document: dict[str, Any] = _plain(settings)
    return document


def with_log_format(settings: Settings, log_format: str) -> Settings:
    """``settings`` with ``notifiers.log.format`` set (``--log-format``; unchanged for ``auto``)."""
    if log_format == "auto":
        return settings
    log = dataclasses.replace(settings.notifiers.log, format=LogFormat(log_format))
    return dataclasses.replace(settings, notifiers=dataclasses.replace(settings.notifiers, log=log))
