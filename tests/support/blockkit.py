"""A Block Kit checker built from Slack's documented limits, and what a person sees of a message. Pure.

Contract:

- :func:`validate_message` returns every problem of one ``chat.postMessage`` body (``text`` + ``blocks``)
  as ``blocks[3].fields[0].text: ...`` strings; [] means Slack's documented limits and our escaping rules
  hold. Limits (api.slack.com/reference/block-kit): at most 50 blocks; ``block_id`` unique, at most 255
  chars; header: ``plain_text`` of at most 150; section: ``text`` (at most 3000) and/or at most 10
  ``fields`` (each at most 2000), one of them required; context: 1..10 elements; actions: 1..25
  elements, ``action_id`` unique within its block and at most 255; button: ``plain_text`` of at most 75,
  ``value`` at most 2000, ``url`` at most 3000, ``style`` ``primary``/``danger``; a text object is never
  empty; the top-level ``text`` is set (notifications, screen readers) and at most 40000.
- Escaping (api.slack.com/reference/surfaces/formatting#escaping): in ``mrkdwn`` text, ``&``, ``<`` and
  ``>`` appear only as ``&amp;`` ``&lt;`` ``&gt;`` or inside a control sequence: a link
  ``<https://…|label>``, a date ``<!date^EPOCH^FORMAT|fallback>``, a mention ``<@U…>``, ``<#C…>``,
  ``<!here>``/``<!channel>``/``<!subteam^…>``.
- :func:`visible_text` is the text a person reads: control sequences replaced by their label (a date by
  its fallback), entities decoded, ``*bold*`` markers dropped, one line per text object.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

MAX_BLOCKS = 50
MAX_MESSAGE_TEXT = 40000
LIMITS = {"header": 150, "section": 3000, "field": 2000, "context": 3000, "button": 75}
BUTTON_STYLES = {"primary", "danger"}

_CONTROL = re.compile(
    r"<(?:(?P<url>(?:https?|mailto|file):[^|<>\s]+)(?:\|(?P<label>[^<>]*))?"
    r"|!date\^\d+\^[^|<>]+\|(?P<fallback>[^<>]+)"
    r"|(?P<mention>@[UW][A-Z0-9]+|#C[A-Z0-9]+(?:\|[^<>]*)?|!here|!channel|!everyone|!subteam\^[A-Z0-9]+))>"
)
_ENTITY = re.compile(r"&(?!(?:amp|lt|gt);)")
_BOLD = re.compile(r"\*([^*\n]+)\*")


def _text_problems(where: str, obj: Any, limit: int, plain_only: bool = False) -> Iterator[str]:
    if not isinstance(obj, Mapping) or obj.get("type") not in ("plain_text", "mrkdwn"):
        yield f"{where}: not a text object"
        return
    if plain_only and obj["type"] != "plain_text":
        yield f"{where}: must be plain_text"
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        yield f"{where}: empty text"
        return
    if len(text) > limit:
        yield f"{where}: {len(text)} chars, Slack allows {limit}"
    if obj["type"] == "mrkdwn":
        yield from (f"{where}: {problem}" for problem in escaping_problems(text))


def escaping_problems(text: str) -> list[str]:
    """Unescaped ``&``, ``<`` or ``>`` outside Slack's control sequences in one mrkdwn text."""
    rest = _CONTROL.sub("", text)
    problems = []
    for char, name in (("<", "<"), (">", ">")):
        if char in rest:
            at = rest.index(char)
            problems.append(f"unescaped {name!r} near {rest[max(0, at - 20):at + 20]!r}")
    if _ENTITY.search(rest):
        problems.append("unescaped '&'")
    return problems


def _button_problems(where: str, element: Mapping[str, Any]) -> Iterator[str]:
    yield from _text_problems(f"{where}.text", element.get("text"), LIMITS["button"], plain_only=True)
    if len(str(element.get("value", ""))) > 2000:
        yield f"{where}.value: more than 2000 chars"
    if len(str(element.get("url", ""))) > 3000:
        yield f"{where}.url: more than 3000 chars"
    if "style" in element and element["style"] not in BUTTON_STYLES:
        yield f"{where}.style: {element['style']!r} is not primary or danger"


def _block_problems(where: str, block: Mapping[str, Any]) -> Iterator[str]:
    kind = block.get("type")
    if kind == "header":
        yield from _text_problems(f"{where}.text", block.get("text"), LIMITS["header"], plain_only=True)
    elif kind == "section":
        if "text" not in block and "fields" not in block:
            yield f"{where}: a section needs text or fields"
        if "text" in block:
            yield from _text_problems(f"{where}.text", block["text"], LIMITS["section"])
        fields = block.get("fields", [])
        if len(fields) > 10:
            yield f"{where}.fields: {len(fields)} fields, Slack allows 10"
        for i, field in enumerate(fields):
            yield from _text_problems(f"{where}.fields[{i}]", field, LIMITS["field"])
    elif kind == "context":
        elements = block.get("elements", [])
        if not 1 <= len(elements) <= 10:
            yield f"{where}.elements: {len(elements)} elements, Slack allows 1 to 10"
        for i, element in enumerate(elements):
            yield from _text_problems(f"{where}.elements[{i}]", element, LIMITS["context"])
    elif kind == "actions":
        elements = block.get("elements", [])
        action_ids: set[str] = set()
        if not 1 <= len(elements) <= 25:
            yield f"{where}.elements: {len(elements)} elements, Slack allows 1 to 25"
        for i, element in enumerate(elements):
            action_id = str(element.get("action_id", ""))
            if len(action_id) > 255:
                yield f"{where}.elements[{i}].action_id: more than 255 chars"
            if action_id and action_id in action_ids:
                yield f"{where}.elements[{i}].action_id: {action_id!r} is used twice in one block"
            action_ids.add(action_id)
            if element.get("type") == "button":
                yield from _button_problems(f"{where}.elements[{i}]", element)
    elif kind != "divider":
        yield f"{where}: block type {kind!r} is not one we render"


def validate_message(text: str, blocks: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every problem of one message body; [] when valid (see the module docstring)."""
    problems: list[str] = []
    if not text:
        problems.append("text: the fallback text is empty")
    elif len(text) > MAX_MESSAGE_TEXT:
        problems.append(f"text: {len(text)} chars, Slack allows {MAX_MESSAGE_TEXT}")
    if len(blocks) > MAX_BLOCKS:
        problems.append(f"blocks: {len(blocks)} blocks, Slack allows {MAX_BLOCKS}")
    block_ids: set[str] = set()
    for index, block in enumerate(blocks):
        where = f"blocks[{index}]"
        block_id = block.get("block_id")
        if block_id is not None:
            if len(str(block_id)) > 255:
                problems.append(f"{where}.block_id: more than 255 chars")
            if block_id in block_ids:
                problems.append(f"{where}.block_id: {block_id!r} is used twice")
            block_ids.add(str(block_id))
        problems.extend(_block_problems(where, block))
    return problems


def _visible(obj: Mapping[str, Any]) -> str:
    text = str(obj.get("text", ""))
    if obj.get("type") != "mrkdwn":
        return text

    def label(match: re.Match[str]) -> str:
        return match.group("label") or match.group("fallback") or match.group("url") or match.group("mention")

    return html.unescape(_BOLD.sub(r"\1", _CONTROL.sub(label, text)))


def visible_text(blocks: Sequence[Mapping[str, Any]]) -> str:
    """What a person reads in the message, one line (or more) per text object, in block order."""
    lines: list[str] = []
    for block in blocks:
        if "text" in block and isinstance(block["text"], Mapping):
            lines.append(_visible(block["text"]))
        lines.extend(_visible(f) for f in block.get("fields", []))
        for element in block.get("elements", []):
            if isinstance(element.get("text"), Mapping):
                lines.append("[" + _visible(element["text"]) + "]")
            elif "text" in element:
                lines.append(_visible(element))
    return "\n".join(lines)
