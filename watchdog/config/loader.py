"""Load, validate and default the agent's YAML config. See :mod:`watchdog.config` for the contract."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from watchdog.infra.yamlguard import YamlBoundsError, check_yaml, decode_yaml
from watchdog.infra.yamllines import path_line

DEFAULT_CONFIG_PATH = Path("/etc/inference-watchdog/config.yaml")


class ConfigError(Exception):
    """A config problem, with the file, the key path (``engines[0].url``) and what is wrong."""

    def __init__(self, file: str, key_path: str, problem: str, line: int | None = None) -> None:
        self.file, self.key_path, self.problem, self.line = file, key_path, problem, line
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key_path or '(top level)'}: {problem}")


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The merged JSON Schema (draft 2020-12) of the whole config file."""
    merged: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://inference-watchdog.invalid/config.schema.json",
        "title": "inference-watchdog configuration",
        "type": "object",
        "additionalProperties": False,
        "properties": {},
        "$defs": {},
    }
    folder = resources.files("watchdog.config") / "schema"
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".json"):
            continue
        fragment = json.loads(entry.read_text(encoding="utf-8"))
        for key, section in fragment.get("properties", {}).items():
            _merge_section(merged["properties"], key, section)
        merged["$defs"].update(fragment.get("$defs", {}))
        merged.setdefault("required", []).extend(fragment.get("required", []))
    if not merged.get("required"):
        merged.pop("required", None)
    return merged


def _merge_section(properties: dict[str, Any], key: str, section: dict[str, Any]) -> None:
    """Add one fragment's top-level ``key``. Two fragments may describe one object section (``serving``:
    the verdict engine's keys and the balancer interfaces' keys): their ``properties`` are joined; the
    first fragment's other attributes stay. Any other repeated key: the later fragment wins."""
    known = properties.get(key)
    if isinstance(known, dict) and "properties" in known and "properties" in section:
        properties[key] = {**known, "properties": {**known["properties"], **section["properties"]}}
    else:
        properties[key] = section


def _key_path(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _apply_defaults(node: Any, sub: dict[str, Any], root: dict[str, Any]) -> Any:
    """Fill schema ``default`` values into ``node`` recursively (objects and arrays of objects)."""
    if "$ref" in sub:
        ref = sub["$ref"].split("/")[-1]
        sub = root["$defs"][ref]
    if node is None and "default" in sub:
        node = copy.deepcopy(sub["default"])
    if isinstance(node, dict):
        for key, prop in sub.get("properties", {}).items():
            resolved = root["$defs"][prop["$ref"].split("/")[-1]] if "$ref" in prop else prop
            if key not in node and "default" in resolved:
                node[key] = copy.deepcopy(resolved["default"])
            if key in node:
                node[key] = _apply_defaults(node[key], prop, root)
        extra = sub.get("additionalProperties")
        if isinstance(extra, dict):
            for key in node:
                if key not in sub.get("properties", {}):
                    node[key] = _apply_defaults(node[key], extra, root)
    elif isinstance(node, list) and isinstance(sub.get("items"), dict):
        node = [_apply_defaults(item, sub["items"], root) for item in node]
    return node


def _subschema(key_path: str) -> dict[str, Any]:
    """The schema of ``key_path`` (``"notifiers.slack"``; ``"engines[]"`` for an item of a list)."""
    root = schema()
    sub: dict[str, Any] = root
    for part in [p for p in key_path.split(".") if p]:
        items = part.endswith("[]")
        name = part[:-2] if items else part
        if "$ref" in sub:
            sub = root["$defs"][sub["$ref"].split("/")[-1]]
        sub = sub["properties"][name]
        if items:
            sub = sub["items"]
    if "$ref" in sub:
        sub = root["$defs"][sub["$ref"].split("/")[-1]]
    return sub


def apply_section_defaults(key_path: str, partial: dict[str, Any]) -> dict[str, Any]:
    """``partial`` (one section of a config, not validated) with the schema's defaults of that section."""
    root = schema()
    result: dict[str, Any] = _apply_defaults(copy.deepcopy(partial), _subschema(key_path), root)
    return result


class _StrKeyLoader(yaml.SafeLoader):
    """SafeLoader whose mapping keys are always strings (``0:`` and ``yes:`` name keys, as in JSON)."""


def _construct_mapping(loader: _StrKeyLoader, node: yaml.MappingNode) -> dict[str, Any]:
    return {str(k): v for k, v in loader.construct_mapping(node, deep=True).items()}


_StrKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_config_text(text: str, file: str = "<config>") -> dict[str, Any]:
    """Parse, validate and default config text; raises :class:`ConfigError` naming file, line and key."""
    try:
        check_yaml(text)
    except YamlBoundsError as exc:
        raise ConfigError(file, "", exc.problem, exc.line or None) from None
    try:
        raw = yaml.load(text, Loader=_StrKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(file, "", f"invalid YAML: {getattr(exc, 'problem', exc)}",
                          mark.line + 1 if mark else None) from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(file, "", "the config must be a mapping")
    root = schema()
    validator = jsonschema.Draft202012Validator(root)
    errors = sorted(validator.iter_errors(raw), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    if errors:
        err = errors[0]
        path = list(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = set(err.schema.get("properties", {}))
            unknown = sorted(k for k in err.instance if k not in allowed)
            if unknown:
                path = [*path, unknown[0]]
        raise ConfigError(file, _key_path(path), _short(err.message), path_line(text, path, item_lines=False))
    result: dict[str, Any] = _apply_defaults(raw, root, root)
    return result


def load_config(path: str | Path | None) -> dict[str, Any]:
    """Load the config file at ``path``; ``None`` means all defaults (no file)."""
    if path is None:
        return load_config_text("", "<defaults>")
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(str(p), "", f"cannot read: {exc.strerror}") from exc
    try:
        text = decode_yaml(data)
    except YamlBoundsError as exc:
        raise ConfigError(str(p), "", exc.problem, exc.line or None) from None
    return load_config_text(text, str(p))


def _short(message: str, limit: int = 200) -> str:
    """A validator message cut to ``limit`` characters: it quotes the offending value, which may be huge."""
    return message if len(message) <= limit else message[:limit] + "…"
