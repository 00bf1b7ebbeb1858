"""Every problem of a config file in one pass, in words, with the common mistakes recognised. Pure.

Contract: :func:`config_problems` returns a list of :class:`ConfigError` (``file:line: key.path:
problem``), sorted by line; [] means :func:`watchdog.config.load_config_text` accepts the text. Beyond the
schema it recognises a secret written inline (a Slack token or webhook URL as a value, or a key such as
``token``/``webhook_url``/``password`` where ``*_env``/``*_file`` belong) and a misspelt key (the nearest
allowed key is suggested). A value that looks like a secret is never repeated in a message.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import yaml

from watchdog.config.loader import ConfigError, _key_path, _StrKeyLoader, schema
from watchdog.infra.suggest import closest
from watchdog.infra.yamlguard import YamlBoundsError, check_yaml
from watchdog.infra.yamllines import path_line

SECRET_VALUE = re.compile(r"^(xox[abposr]-|xapp-|https://hooks\.slack\.com/)|(-----BEGIN [A-Z ]*PRIVATE KEY)")
SECRET_KEY = re.compile(r"(^|_)(token|secret|password|passwd|webhook|webhook_url|api_key)$")
TYPE_WORDS = {"number": "a number", "integer": "a whole number", "string": "text", "boolean": "true or false",
              "array": "a list", "object": "a mapping (key: value)", "null": "empty"}


def _looks_secret(value: Any) -> bool:
    return isinstance(value, str) and bool(SECRET_VALUE.search(value.strip()))


def _shown(value: Any) -> str:
    return "(a secret, not shown)" if _looks_secret(value) else repr(value)


def _words(error: jsonschema.ValidationError) -> str:
    """The schema error as a sentence, with the field's description where the rule is a pattern."""
    kind, value, rule = error.validator, error.instance, error.validator_value
    rule = rule if isinstance(rule, (list, int, float, str)) else str(rule)
    description = str(error.schema.get("description", "")) if isinstance(error.schema, dict) else ""
    if kind == "type":
        wanted = rule if isinstance(rule, list) else [rule]
        return f"must be {' or '.join(TYPE_WORDS.get(str(w), str(w)) for w in wanted)}, not {_shown(value)}"
    if kind == "enum":
        choices = rule if isinstance(rule, list) else [rule]
        return f"{_shown(value)} is not one of: {', '.join(str(v) for v in choices)}"
    if kind == "pattern":
        return f"{_shown(value)} is not valid here" + (f": {description}" if description else "")
    if kind in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        words = {"minimum": "at least", "exclusiveMinimum": "more than", "maximum": "at most",
                 "exclusiveMaximum": "less than"}[str(kind)]
        return f"must be {words} {rule}, not {_shown(value)}"
    if kind == "required":
        return error.message.replace("is a required property", "is required")
    if kind in ("minItems", "maxItems"):
        return f"needs {'at least' if kind == 'minItems' else 'at most'} {rule} item(s)"
    return error.message if not _looks_secret(value) else "invalid value (a secret, not shown)"


def _unknown_key_problem(key: str, value: Any, allowed: list[str]) -> str:
    if SECRET_KEY.search(key) or _looks_secret(value):
        options = [a for a in allowed if a.endswith(("_env", "_file"))]
        where = f" (here: {', '.join(options)})" if options else ""
        return ("a secret must not be written in the config: put it in an environment variable or a file "
                f"and name that with the *_env / *_file key{where}")
    match = closest(key, allowed)
    hint = f" (did you mean {match}?)" if match else ""
    return f"unknown key {key!r}{hint}; allowed here: {', '.join(sorted(allowed))}"


def _inline_secrets(node: Any, path: list[str | int]) -> list[tuple[list[str | int], str]]:
    """Known keys whose value is a secret (e.g. a token pasted into ``token_env``)."""
    found: list[tuple[list[str | int], str]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(_inline_secrets(value, [*path, key]))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_inline_secrets(value, [*path, index]))
    elif _looks_secret(node):
        key = str(path[-1]) if path else ""
        what = ("name an environment variable here, not the secret itself" if key.endswith("_env")
                else "name a file here, not the secret itself" if key.endswith("_file")
                else f"a secret must not be written in the config: put it in an environment variable or a "
                     f"file and name that with {key}_env or {key}_file")
        found.append((path, what))
    return found


def config_problems(text: str, file: str = "<config>") -> list[ConfigError]:
    """Every problem of config ``text`` (see the module docstring)."""
    try:
        check_yaml(text)  # alias bombs and oversized documents are refused before parsing
    except YamlBoundsError as exc:
        return [ConfigError(file, "", exc.problem, exc.line or None)]
    try:
        raw = yaml.load(text, Loader=_StrKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return [ConfigError(file, "", f"invalid YAML: {getattr(exc, 'problem', exc)}",
                            mark.line + 1 if mark else None)]
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        return [ConfigError(file, "", "the config must be a mapping (key: value)")]
    problems: list[ConfigError] = []
    seen: set[tuple[str, str]] = set()
    for path, what in _inline_secrets(raw, []):
        problems.append(ConfigError(file, _key_path(path), what, path_line(text, path, item_lines=False)))
        seen.add((_key_path(path), "secret"))
    for error in jsonschema.Draft202012Validator(schema()).iter_errors(raw):
        path = list(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = list(error.schema.get("properties", {}))
            for key in sorted(k for k in error.instance if k not in allowed):
                key_path = [*path, key]
                if (_key_path(key_path), "secret") in seen:
                    continue
                problems.append(ConfigError(file, _key_path(key_path),
                                            _unknown_key_problem(key, error.instance[key], allowed),
                                            path_line(text, key_path, item_lines=False)))
            continue
        if (_key_path(path), "secret") in seen:
            continue
        problems.append(ConfigError(file, _key_path(path), _words(error), path_line(text, path, item_lines=False)))
    return sorted(problems, key=lambda p: (p.line or 0, p.key_path))
