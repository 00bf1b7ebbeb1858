"""The runbook catalogue: ``runbooks/<id>.yaml`` (machine part) beside ``runbooks/<id>.md`` (prose).

File format (see docs/runbooks.md)::

    id: gpu-xid                      # equals the file name without .yaml
    title: GPU XID error
    alerts: [GpuXidFatal, GpuXidBurst]
    diagnose:   [step, ...]          # read-only: command or http GET; run when the alert fires
    remediate:  [step, ...]          # ordered; guards per step; see watchdog.runbooks.steps

Search path: ``runbooks.paths`` in the config, in order; an id found in an earlier directory shadows
the same id later (so ``/etc/inference-watchdog/runbooks`` overrides the packaged copy). With no paths
configured the default search path is :func:`default_search_path`.

Contract: :func:`load_catalogue` returns a consistent :class:`Catalogue` or raises
:class:`RunbookError` naming file, line (when known), key path and problem. No alert is served by two
runbooks; every id matches its file name.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from watchdog.config.settings import RunbooksSettings
from watchdog.infra.paths import asset_dirs
from watchdog.infra.yamlguard import YamlBoundsError, check_yaml, decode_yaml
from watchdog.infra.yamllines import path_line
from watchdog.runbooks.steps import Step, StepError, parse_step

RUNBOOK_ID_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
ALERT_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ETC_RUNBOOKS = Path("/etc/inference-watchdog/runbooks")
TOP_KEYS = {"id", "title", "alerts", "diagnose", "remediate", "summary"}


class RunbookError(Exception):
    """A runbook file problem: ``file``, optional ``line``, ``key_path`` (``remediate[1].verify``)."""

    def __init__(self, file: str, key_path: str, problem: str, line: int | None = None) -> None:
        self.file, self.key_path, self.problem, self.line = file, key_path, problem, line
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key_path or '(top level)'}: {problem}")


@dataclass(frozen=True)
class Runbook:
    """One failure mode's runbook: metadata, read-only diagnostics and ordered remediation steps."""

    id: str
    title: str
    alerts: tuple[str, ...]
    diagnose: tuple[Step, ...] = ()
    remediate: tuple[Step, ...] = ()
    summary: str = ""
    source: str = ""
    markdown_path: str = ""

    def step(self, name: str) -> Step | None:
        """The remediation step called ``name``, or None."""
        for step in self.remediate:
            if step.name == name:
                return step
        return None

    def markdown(self) -> str:
        """The human runbook text ("" when there is no .md beside the .yaml)."""
        if not self.markdown_path:
            return ""
        try:
            return Path(self.markdown_path).read_text(encoding="utf-8")
        except OSError:
            return ""


@dataclass(frozen=True)
class Catalogue:
    """Runbooks by id, plus the alert → runbook index."""

    runbooks: dict[str, Runbook] = field(default_factory=dict)
    by_alert: dict[str, str] = field(default_factory=dict)

    def get(self, runbook_id: str) -> Runbook | None:
        """The runbook with this id, or None."""
        return self.runbooks.get(runbook_id)

    def for_alert(self, alertname: str, runbook_annotation: str = "") -> Runbook | None:
        """The runbook serving an alert: the one its ``runbook`` annotation names, else by alert name."""
        if runbook_annotation and runbook_annotation in self.runbooks:
            return self.runbooks[runbook_annotation]
        runbook_id = self.by_alert.get(alertname)
        return self.runbooks.get(runbook_id) if runbook_id else None

    def __len__(self) -> int:
        return len(self.runbooks)

    def __iter__(self) -> Any:
        return iter(sorted(self.runbooks.values(), key=lambda r: r.id))


def default_search_path(config_path: str | Path | None = None) -> list[Path]:
    """Where runbooks are looked for when ``runbooks.paths`` is empty, highest priority first:
    ``<config dir>/runbooks``, ``/etc/inference-watchdog/runbooks``, then the shipped runbooks
    (:func:`watchdog.paths.asset_dirs`: the source checkout, the venv's ``share/``, ``/usr/share``)."""
    out: list[Path] = []
    if config_path:
        out.append(Path(config_path).resolve().parent / "runbooks")
    out += [ETC_RUNBOOKS, *asset_dirs("runbooks")]
    seen: set[Path] = set()
    return [p for p in out if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]


def resolve_paths(configured: Sequence[str], config_path: str | Path | None = None) -> list[Path]:
    """Configured entries (directories, files or globs) made absolute against the config's directory;
    the default search path when none are configured."""
    if not configured:
        return default_search_path(config_path)
    base = Path(config_path).resolve().parent if config_path else Path.cwd()
    out: list[Path] = []
    for entry in configured:
        path = Path(entry)
        if not path.is_absolute():
            path = base / path
        if glob.has_magic(str(path)):
            out.extend(Path(p) for p in sorted(glob.glob(str(path))))
        else:
            out.append(path)
    return out


def _runbook_files(paths: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")))
        elif path.is_file():
            files.append(path)
    return files


def _key_parts(key_path: str) -> list[str | int]:
    parts: list[str | int] = []
    for name, index in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", key_path):
        parts.append(int(index) if index else name)
    return parts


def parse_runbook(text: str, file: str) -> Runbook:
    """One runbook from YAML text; raises :class:`RunbookError`."""

    def fail(key_path: str, problem: str) -> RunbookError:
        return RunbookError(file, key_path, problem, path_line(text, _key_parts(key_path)))

    try:
        check_yaml(text)
    except YamlBoundsError as exc:
        raise RunbookError(file, "", exc.problem, exc.line or None) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise RunbookError(file, "", f"invalid YAML: {getattr(exc, 'problem', exc)}",
                           mark.line + 1 if mark else None) from exc
    if not isinstance(raw, dict):
        raise fail("", "a runbook file is a mapping with id, title, alerts, diagnose, remediate")
    unknown = sorted(set(raw) - TOP_KEYS)
    if unknown:
        raise fail(unknown[0], f"unknown key (allowed: {', '.join(sorted(TOP_KEYS))})")
    runbook_id = raw.get("id")
    if not isinstance(runbook_id, str) or not RUNBOOK_ID_RE.fullmatch(runbook_id):
        raise fail("id", "required: lowercase letters, digits and '-'")
    stem = Path(file).stem
    if not file.startswith("<") and stem != runbook_id:
        raise fail("id", f"must equal the file name ({stem!r})")
    title = raw.get("title")
    if not isinstance(title, str) or not title.strip():
        raise fail("title", "required")
    alerts = raw.get("alerts")
    if not isinstance(alerts, list) or not alerts:
        raise fail("alerts", "required: the alert names this runbook serves")
    for i, name in enumerate(alerts):
        if not isinstance(name, str) or not ALERT_NAME_RE.fullmatch(name):
            raise fail(f"alerts[{i}]", f"{name!r} is not an alert name")
    if len(set(alerts)) != len(alerts):
        raise fail("alerts", "lists an alert twice")
    summary = raw.get("summary", "")
    if not isinstance(summary, str):
        raise fail("summary", "expected text")
    steps: dict[str, tuple[Step, ...]] = {}
    names: set[str] = set()
    for section in ("diagnose", "remediate"):
        items = raw.get(section) or []
        if not isinstance(items, list):
            raise fail(section, "expected a list of steps")
        parsed = []
        for i, item in enumerate(items):
            where = f"{section}[{i}]"
            try:
                step = parse_step(item, diagnose=section == "diagnose")
            except StepError as exc:
                key = f"{where}.{exc.key_path}" if exc.key_path else where
                raise fail(key, exc.problem) from exc
            if step.name in names:
                raise fail(f"{where}.name", f"step name {step.name!r} is used twice in this runbook")
            names.add(step.name)
            parsed.append(step)
        steps[section] = tuple(parsed)
    markdown = Path(file).with_suffix(".md")
    return Runbook(
        id=runbook_id,
        title=title.strip(),
        alerts=tuple(alerts),
        diagnose=steps["diagnose"],
        remediate=steps["remediate"],
        summary=summary.strip(),
        source=file,
        markdown_path=str(markdown) if not file.startswith("<") and markdown.is_file() else "",
    )


def load_runbook_file(path: str | Path) -> Runbook:
    """Parse one runbook file; raises :class:`RunbookError`."""
    p = Path(path)
    try:
        text = decode_yaml(p.read_bytes())
    except OSError as exc:
        raise RunbookError(str(p), "", f"cannot read: {exc.strerror}") from exc
    except YamlBoundsError as exc:
        raise RunbookError(str(p), "", exc.problem, exc.line or None) from None
    return parse_runbook(text, str(p))


def build_catalogue(runbooks: Iterable[Runbook]) -> Catalogue:
    """A catalogue from runbooks in priority order (the first of an id wins); raises
    :class:`RunbookError` when two runbooks claim the same alert."""
    by_id: dict[str, Runbook] = {}
    for runbook in runbooks:
        by_id.setdefault(runbook.id, runbook)
    by_alert: dict[str, str] = {}
    for runbook in sorted(by_id.values(), key=lambda r: r.id):
        for alert in runbook.alerts:
            other = by_alert.get(alert)
            if other is not None:
                raise RunbookError(runbook.source, "alerts",
                                   f"alert {alert} is already served by runbook {other!r}")
            by_alert[alert] = runbook.id
    return Catalogue(by_id, by_alert)


def load_catalogue(paths: Iterable[str | Path]) -> Catalogue:
    """Every runbook in ``paths`` (directories or files, highest priority first)."""
    return build_catalogue(load_runbook_file(f) for f in _runbook_files(Path(p) for p in paths))


def catalogue_from_settings(settings: RunbooksSettings, config_path: str | Path | None = None) -> Catalogue:
    """The catalogue ``runbooks.paths`` (or the default search path) names."""
    return load_catalogue(resolve_paths(list(settings.paths), config_path))
