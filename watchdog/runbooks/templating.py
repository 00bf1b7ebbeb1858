"""Runbook templates: ``{{ labels.gpu }}`` placeholders inside one string, rendered safely.

Syntax (deliberately tiny, no expressions, no filters)::

    {{ labels.NAME }}              a label of the alert (``labels.job``, ``labels.gpu``)
    {{ node }}                     this node's name
    {{ vars.NAME }}                an operator-provided value (``remediation.vars`` in the config)
    {{ config.PATH }}              a config value; PATH is ``key.key`` with ``key[LABEL]`` lookups:
                                   ``config.engines[job].unit`` is the ``unit`` of the entry of the
                                   ``engines`` list whose ``job`` (or ``name``) equals the alert's
                                   ``job`` label (for a mapping, the key equal to the label's value)

Contract:
- A template renders to exactly one string: one argv element, one unit name, one URL. Literal text
  around a placeholder stays in the same element, so a value can never split into two arguments.
- Every substituted value is validated before use: non-empty, at most :data:`MAX_LABEL_VALUE` (labels)
  or :data:`MAX_CONFIG_VALUE` characters, only allowlisted characters, and never starting with ``-``.
  Label values come from engines and kernels (untrusted) and get the strict set (no ``/``, ``=``,
  quotes, spaces, ``$``, ``;``); config values are the operator's and may also hold URL characters.
  A value that fails is refused with :class:`TemplateRefused` (the caller audits it); a value that is
  absent raises :class:`TemplateMissing`.
- Syntax errors are found at load time (:func:`parse_template` raises :class:`TemplateSyntaxError`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

MAX_LABEL_VALUE = 128
MAX_CONFIG_VALUE = 512

LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:@+-]*")
CONFIG_VALUE_RE = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9._:@+=,/%?&~-]*")

_PLACEHOLDER_RE = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_REF_RE = re.compile(rf"(labels|vars)\.({_NAME})|node|config((?:\.{_NAME}(?:\[{_NAME}\])?)+)")
_SEGMENT_RE = re.compile(rf"\.({_NAME})(?:\[({_NAME})\])?")


class TemplateSyntaxError(ValueError):
    """A template that cannot be parsed: unknown reference, unbalanced braces."""


class TemplateMissing(LookupError):
    """A placeholder whose value is absent (no such label, config key or var)."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        super().__init__(f"<{ref}> has no value for this alert")


class TemplateRefused(ValueError):
    """A substituted value that failed validation; ``value`` is shown escaped, never executed."""

    def __init__(self, ref: str, value: str, why: str) -> None:
        self.ref, self.value, self.why = ref, value, why
        super().__init__(f"<{ref}> = {value[:80]!r} refused: {why}")


@dataclass(frozen=True)
class Placeholder:
    """One ``{{ ... }}`` reference: ``source`` is labels, vars, node or config; ``path`` its keys."""

    source: str
    path: tuple[tuple[str, str | None], ...]  # (key, label-lookup or None); one element for labels/vars

    @property
    def text(self) -> str:
        """The reference as written (normalised), for messages."""
        if self.source == "node":
            return "node"
        parts = "".join(f".{k}" + (f"[{lk}]" if lk else "") for k, lk in self.path)
        return f"{self.source}{parts}"


@dataclass(frozen=True)
class Template:
    """A parsed template: literal strings and placeholders in order."""

    source: str
    parts: tuple[str | Placeholder, ...] = field(default=())

    @property
    def placeholders(self) -> tuple[Placeholder, ...]:
        """The placeholders it uses."""
        return tuple(p for p in self.parts if isinstance(p, Placeholder))

    @property
    def outline(self) -> str:
        """The template for a reader without an alert at hand: each placeholder as ``<labels.job>``
        (never the raw ``{{ }}`` syntax, which is for runbook authors)."""
        return "".join(p if isinstance(p, str) else f"<{p.text}>" for p in self.parts) if self.parts \
            else self.source

    @property
    def is_literal(self) -> bool:
        """True when there is nothing to substitute."""
        return not self.placeholders


def _parse_ref(ref: str, template: str) -> Placeholder:
    match = _REF_RE.fullmatch(ref)
    if match is None:
        raise TemplateSyntaxError(
            f"{template!r}: unknown reference {{{{ {ref} }}}} "
            "(use labels.NAME, vars.NAME, node or config.PATH)"
        )
    if ref == "node":
        return Placeholder("node", ())
    if match.group(1):
        return Placeholder(match.group(1), ((match.group(2), None),))
    segments = tuple((m.group(1), m.group(2)) for m in _SEGMENT_RE.finditer(match.group(3)))
    return Placeholder("config", segments)


def parse_template(text: str) -> Template:
    """Parse ``text``; raises :class:`TemplateSyntaxError` for bad placeholders or stray braces."""
    parts: list[str | Placeholder] = []
    pos = 0
    for match in _PLACEHOLDER_RE.finditer(text):
        literal = text[pos:match.start()]
        if "{{" in literal or "}}" in literal:
            raise TemplateSyntaxError(f"{text!r}: unbalanced '{{{{' or '}}}}'")
        if literal:
            parts.append(literal)
        parts.append(_parse_ref(match.group(1), text))
        pos = match.end()
    tail = text[pos:]
    if "{{" in tail or "}}" in tail:
        raise TemplateSyntaxError(f"{text!r}: unbalanced '{{{{' or '}}}}'")
    if tail:
        parts.append(tail)
    return Template(text, tuple(parts))


@dataclass(frozen=True)
class TemplateContext:
    """What placeholders may read: the alert's labels, the config, operator vars, the node name."""

    labels: Mapping[str, str] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    vars: Mapping[str, str] = field(default_factory=dict)
    node: str = ""


def validate_value(ref: str, value: str, trusted: bool) -> str:
    """``value`` if it is safe as (part of) one argument; raises :class:`TemplateRefused` otherwise.

    ``trusted`` values (operator config) may use URL characters and be longer; untrusted ones (labels,
    which engines and kernel messages control) get the strict character set.
    """
    limit = MAX_CONFIG_VALUE if trusted else MAX_LABEL_VALUE
    pattern = CONFIG_VALUE_RE if trusted else LABEL_VALUE_RE
    if value.startswith("-"):
        raise TemplateRefused(ref, value, "starts with '-' (would read as an option)")
    if len(value) > limit:
        raise TemplateRefused(ref, value, f"longer than {limit} characters")
    if pattern.fullmatch(value) is None:
        bad = sorted({c for c in value if pattern.fullmatch("a" + c) is None})
        shown = "".join(bad)[:20] or value[:1]
        raise TemplateRefused(ref, value, f"contains characters outside the allowed set: {shown!r}")
    if ".." in value.split("/") or value == "..":
        raise TemplateRefused(ref, value, "contains a '..' path segment")
    return value


def _lookup_config(ph: Placeholder, ctx: TemplateContext) -> Any:
    node: Any = ctx.config
    for key, label in ph.path:
        if not isinstance(node, Mapping) or key not in node:
            raise TemplateMissing(ph.text)
        node = node[key]
        if label is None:
            continue
        wanted = ctx.labels.get(label, "")
        if not wanted:
            raise TemplateMissing(ph.text)
        if isinstance(node, Mapping):
            if wanted not in node:
                raise TemplateMissing(ph.text)
            node = node[wanted]
        elif isinstance(node, list):
            found = [item for item in node if isinstance(item, Mapping)
                     and wanted in (item.get("job"), item.get("name"))]
            if not found:
                raise TemplateMissing(ph.text)
            node = found[0]
        else:
            raise TemplateMissing(ph.text)
    return node


def resolve(ph: Placeholder, ctx: TemplateContext) -> tuple[str, bool]:
    """The raw value of one placeholder and whether it is trusted; raises :class:`TemplateMissing`."""
    if ph.source == "labels":
        value = ctx.labels.get(ph.path[0][0], "")
        trusted = False
    elif ph.source == "vars":
        value = ctx.vars.get(ph.path[0][0], "")
        trusted = True
    elif ph.source == "node":
        value = ctx.node
        trusted = False
    else:
        raw = _lookup_config(ph, ctx)
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            raise TemplateMissing(ph.text)
        value = str(raw)
        trusted = True
    if value == "":
        raise TemplateMissing(ph.text)
    return str(value), trusted


def render(template: Template, ctx: TemplateContext, *, url: bool = False) -> str:
    """The template with every placeholder replaced by its validated value.

    With ``url=True`` untrusted values are percent-encoded as well (they can never add a path
    segment, a query parameter or change the host). Raises :class:`TemplateMissing` or
    :class:`TemplateRefused`.
    """
    out: list[str] = []
    for part in template.parts:
        if isinstance(part, str):
            out.append(part)
            continue
        value, trusted = resolve(part, ctx)
        validate_value(part.text, value, trusted)
        out.append(quote(value, safe="") if url and not trusted else value)
    return "".join(out)


def render_data(data: Any, ctx: TemplateContext) -> Any:
    """Render every template inside a nested structure of dicts, lists and :class:`Template` leaves."""
    if isinstance(data, Template):
        return render(data, ctx)
    if isinstance(data, dict):
        return {key: render_data(value, ctx) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [render_data(item, ctx) for item in data]
    return data
