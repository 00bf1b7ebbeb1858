"""Bounds on YAML input before it is composed: what a hostile or corrupted file cannot do to the agent.

:func:`check_yaml` runs PyYAML's event parser (a state machine: no recursion, linear time) over the
text and refuses, with a one-line reason and the line concerned, a file that is binary (NUL or other
control bytes), larger than ``MAX_BYTES``, nested deeper than ``MAX_DEPTH`` (composing recurses and
would hit Python's recursion limit), or whose aliases expand it to more than ``MAX_NODES`` nodes (an
alias bomb: a few hundred bytes that expand to billions of nodes for anything walking the result, such
as the schema validator). :func:`decode_yaml` turns a file's bytes into text or says which byte is not UTF-8.
Messages never quote the document's values.
"""

from __future__ import annotations

import yaml

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 200_000
_CONTROL = {chr(c) for c in range(32)} - {"\t", "\n", "\r"}


class YamlBoundsError(ValueError):
    """A YAML text outside the bounds; ``line`` is 1-based (0 when not known)."""

    def __init__(self, problem: str, line: int = 0) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line


def decode_yaml(data: bytes) -> str:
    """``data`` as UTF-8 text (a leading BOM dropped); raises :class:`YamlBoundsError` naming the byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise YamlBoundsError(f"not UTF-8 text (byte {exc.start})", line) from None


def check_yaml(text: str) -> None:
    """Raise :class:`YamlBoundsError` when ``text`` is outside the bounds of the module docstring.

    YAML syntax errors are left to the caller's own parse (which reports them with their line).
    """
    if len(text) > MAX_BYTES:
        raise YamlBoundsError(f"file is {len(text)} characters; the limit is {MAX_BYTES}")
    bad = next((i for i, ch in enumerate(text) if ch in _CONTROL), None)
    if bad is not None:
        raise YamlBoundsError(f"binary content: control character {ord(text[bad]):#04x} at offset {bad}",
                              text.count("\n", 0, bad) + 1)
    # Each open collection's expanded node count; an alias adds its anchor's whole expansion.
    stack: list[tuple[int, str | None]] = [(0, None)]
    anchored: dict[str, int] = {}
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                stack.append((1, event.anchor))
                if len(stack) - 1 > MAX_DEPTH:
                    raise YamlBoundsError(f"nested more than {MAX_DEPTH} levels deep", _line(event))
                continue
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                size, anchor = stack.pop()
            elif isinstance(event, yaml.ScalarEvent):
                size, anchor = 1, event.anchor
            elif isinstance(event, yaml.AliasEvent):
                size, anchor = anchored.get(str(event.anchor), 1), None
            else:
                continue
            if anchor is not None:
                anchored[anchor] = size
            total, open_anchor = stack[-1]
            stack[-1] = (total + size, open_anchor)
            if total + size > MAX_NODES:
                raise YamlBoundsError(f"expands to more than {MAX_NODES} nodes (an alias bomb?)", _line(event))
    except yaml.YAMLError:
        return  # a syntax error: the caller's parser reports it with its line


def _line(event: yaml.Event) -> int:
    mark = event.start_mark
    return mark.line + 1 if mark is not None else 0
