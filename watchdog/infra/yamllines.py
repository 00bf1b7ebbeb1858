"""1-based source lines of YAML nodes and key paths, for ``file:line: key path: problem`` errors."""

from __future__ import annotations

from collections.abc import Sequence

import yaml


def line_of(node: yaml.Node | None) -> int:
    """The 1-based line where ``node`` starts (0 for None)."""
    return node.start_mark.line + 1 if node is not None else 0


def path_line(text: str, key_path: Sequence[str | int], *, item_lines: bool = True) -> int | None:
    """The line of the last key (or, with ``item_lines``, list item) of ``key_path`` found in ``text``.

    Walks the composed node tree: a ``str`` part follows a mapping key (the last one where a key is
    repeated, as loaders keep the last value), an ``int`` part a list item.
    Where the path leaves the tree, the line reached so far is the answer (None before any step or for
    text that is not YAML). Without ``item_lines`` a list item keeps the line of the key above it.
    """
    try:
        node: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for part in key_path:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in reversed(node.value):  # a repeated key: the value loaded
                if key_node.value == part:
                    line = line_of(key_node)
                    node = value_node
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            if item_lines:
                line = line_of(node)
        else:
            return line
    return line
