"""Go RE2 regular expressions (Prometheus' label matchers) translated to Python's ``re``.

Prometheus 2.42 matches ``=~``/``!~`` and ``label_replace`` regexes with Go's RE2, fully anchored and
without the ``s`` flag. Python's ``re`` differs in ways real rule files hit:
- inline flags such as ``d(?i)b`` apply to the rest of the group in Go; Python 3.11 only accepts
  global flags at the very start, so they become scoped groups ``d(?i:b)``;
- ``\\w``, ``\\d``, ``\\s``, ``\\b`` are ASCII-only in Go (compiled here with ``re.ASCII``; ``\\s`` is
  Go's ``[\\t\\n\\f\\r ]``);
- ``$`` means end of text in Go (Python's also matches before a final newline) and ``\\z`` is ``\\Z``;
- POSIX classes ``[[:alpha:]]``, Unicode categories ``\\p{L}`` and ``\\Q...\\E`` quoting exist only
  in Go (Unicode scripts such as ``\\p{Greek}`` are not supported here);
- Python-only syntax (look-arounds, back-references, atomic groups) is an error in Go and here.
Known gap: with ``(?i)``, Go folds non-ASCII letters too; ``re.ASCII`` folds ASCII letters only.
"""

from __future__ import annotations

import re
from functools import lru_cache

_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_GO_SPACE = "\\t\\n\\f\\r "
_FLAG_LETTERS = frozenset("imsU")


class GoRegexError(ValueError):
    """A pattern Go's RE2 would reject (or one this translation cannot express)."""


def translate(pattern: str) -> str:
    """A Python ``re`` pattern (to compile with ``re.ASCII``) matching what Go's RE2 matches."""
    out: list[str] = []
    # One entry per open group: the scoped-flag groups opened inside it by inline flags (closed when
    # it closes, and around each '|'), and whether multi-line mode is on.
    open_groups: list[tuple[list[str], list[bool]]] = [([], [False])]
    i = 0
    length = len(pattern)
    while i < length:
        char = pattern[i]
        if char == "\\":
            i = _escape(pattern, i, out, in_class=False, multiline=open_groups[-1][1][0])
            continue
        if char == "[":
            i = _char_class(pattern, i, out)
            continue
        if char == "(":
            if pattern.startswith("(?", i):
                end = i + 2
                while end < length and pattern[end] not in ":)":
                    end += 1
                flags = pattern[i + 2 : end]
                if flags.startswith(("P<", "P=", "P>")) and not flags.startswith("P<"):
                    raise GoRegexError(f"invalid or unsupported Perl syntax: {pattern[i:end + 1]!r}")
                if flags.startswith("P<"):
                    out.append(pattern[i : pattern.index(">", i) + 1])
                    i = pattern.index(">", i) + 1
                    open_groups.append(([], [open_groups[-1][1][0]]))
                    continue
                if end >= length or not flags.replace("-", "") or any(
                    f not in _FLAG_LETTERS for f in flags.replace("-", "")
                ):
                    if flags == "" and end < length and pattern[end] == ":":
                        out.append("(?:")
                        i = end + 1
                        open_groups.append(([], [open_groups[-1][1][0]]))
                        continue
                    raise GoRegexError(f"invalid or unsupported Perl syntax: {pattern[i:end + 1]!r}")
                if "U" in flags:
                    raise GoRegexError("unsupported flag U (ungreedy) in regular expression")
                on, _, off = flags.partition("-")
                multiline = open_groups[-1][1][0]
                if "m" in on:
                    multiline = True
                if "m" in off:
                    multiline = False
                scoped = "(?" + flags + ":"
                out.append(scoped)
                if pattern[end] == ":":  # (?flags:...) group
                    open_groups.append(([], [multiline]))
                else:  # (?flags): applies to the rest of the enclosing group
                    open_groups[-1][0].append(scoped)
                    open_groups[-1][1][0] = multiline
                i = end + 1
                continue
            out.append("(")
            open_groups.append(([], [open_groups[-1][1][0]]))
            i += 1
            continue
        if char == ")":
            if len(open_groups) == 1:
                raise GoRegexError("unexpected ): unbalanced parenthesis")
            openers, _ = open_groups.pop()
            out.append(")" * len(openers) + ")")
            i += 1
            continue
        if char == "|" and open_groups[-1][0]:
            # Inline flags hold to the end of the group, across alternatives; a scoped group would
            # swallow the '|', so close the scopes before it and reopen them after it.
            openers = open_groups[-1][0]
            out.append(")" * len(openers) + "|" + "".join(openers))
            i += 1
            continue
        if char == "$":
            out.append("$" if open_groups[-1][1][0] else "\\Z")
            i += 1
            continue
        if char == "{" and re.match(r"\{,\d*\}", pattern[i:]):
            out.append("\\{")  # Go treats {,n} as literal text
            i += 1
            continue
        out.append(char)
        i += 1
    if len(open_groups) != 1:
        raise GoRegexError("missing closing ): unbalanced parenthesis")
    out.append(")" * len(open_groups[0][0]))
    return "".join(out)


def _escape(pattern: str, i: int, out: list[str], *, in_class: bool, multiline: bool) -> int:
    """Translate the escape at ``pattern[i]`` (a backslash); returns the index after it."""
    if i + 1 >= len(pattern):
        raise GoRegexError("trailing backslash at end of expression")
    code = pattern[i + 1]
    if code == "Q":
        end = pattern.find("\\E", i + 2)
        literal = pattern[i + 2 :] if end == -1 else pattern[i + 2 : end]
        out.append(re.escape(literal) if not in_class else "".join("\\" + c for c in literal))
        return len(pattern) if end == -1 else end + 2
    if code.isdigit() and code != "0":
        raise GoRegexError(f"invalid escape sequence: \\{code} (back-references are not supported)")
    if code in "pP":
        if pattern.startswith("{", i + 2):
            end = pattern.find("}", i + 2)
            if end == -1:
                raise GoRegexError("invalid character class range: missing }")
            name, after = pattern[i + 3 : end], end + 1
        else:
            name, after = pattern[i + 2 : i + 3], i + 3
        negated = code == "P"
        if name.startswith("^"):
            name, negated = name[1:], not negated
        ranges = _unicode_category_ranges(name)
        if in_class:
            if negated:
                raise GoRegexError(f"unsupported negated Unicode class inside brackets: \\{code}{{{name}}}")
            out.append(ranges)
        else:
            out.append(f"[{'^' if negated else ''}{ranges}]")
        return after
    if code == "z":
        out.append("\\Z")
        return i + 2
    if code == "Z":
        raise GoRegexError("invalid escape sequence: \\Z")
    if code == "s":
        out.append(_GO_SPACE if in_class else f"[{_GO_SPACE}]")
        return i + 2
    if code == "S" and not in_class:
        out.append(f"[^{_GO_SPACE}]")
        return i + 2
    if code == "x" and pattern.startswith("{", i + 2):
        end = pattern.index("}", i + 2)
        out.append(f"\\U{int(pattern[i + 3 : end], 16):08x}")
        return end + 1
    out.append(pattern[i : i + 2])
    return i + 2


def _char_class(pattern: str, i: int, out: list[str]) -> int:
    """Translate a bracket expression starting at ``pattern[i] == '['``."""
    out.append("[")
    i += 1
    if i < len(pattern) and pattern[i] == "^":
        out.append("^")
        i += 1
    first = True
    while i < len(pattern):
        char = pattern[i]
        if char == "]" and not first:
            out.append("]")
            return i + 1
        first = False
        if char == "[" and pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            name = pattern[i + 2 : end] if end != -1 else ""
            if name in _POSIX_CLASSES:
                out.append(_POSIX_CLASSES[name])
                i = end + 2
                continue
            if name.startswith("^"):
                raise GoRegexError(f"unsupported negated POSIX class [:{name}:]")
        if char == "\\":
            i = _escape(pattern, i, out, in_class=True, multiline=False)
            continue
        if char == "[":
            out.append("\\[")
            i += 1
            continue
        out.append(char)
        i += 1
    raise GoRegexError("missing closing ]")


_CATEGORY_NAMES = frozenset((
    "C", "Cc", "Cf", "Co", "Cs", "L", "Ll", "Lm", "Lo", "Lt", "Lu", "M", "Mc", "Me", "Mn", "N", "Nd",
    "Nl", "No", "P", "Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps", "S", "Sc", "Sk", "Sm", "So", "Z", "Zl",
    "Zp", "Zs",
))


@lru_cache(maxsize=64)
def _unicode_category_ranges(name: str) -> str:
    """A character-class body for a Unicode general category (``L``, ``Lu``, ``Nd``, ...)."""
    import unicodedata

    if name not in _CATEGORY_NAMES:
        raise GoRegexError(f"unsupported Unicode class {name!r} (general categories only)")
    parts: list[str] = []
    start = previous = -2
    for code in range(0x110000):
        if unicodedata.category(chr(code)).startswith(name):
            if code != previous + 1:
                if start >= 0:
                    parts.append(_range(start, previous))
                start = code
            previous = code
    if start >= 0:
        parts.append(_range(start, previous))
    return "".join(parts)


def _range(first: int, last: int) -> str:
    if first == last:
        return f"\\U{first:08x}"
    return f"\\U{first:08x}-\\U{last:08x}"


@lru_cache(maxsize=4096)
def compile_anchored(pattern: str) -> re.Pattern[str]:
    """Go's ``^(?:pattern)$`` as a Python pattern; use ``.match`` (it ends with ``\\Z``)."""
    try:
        return re.compile(f"(?:{translate(pattern)})\\Z", re.ASCII)
    except re.error as exc:
        raise GoRegexError(f"error parsing regexp: {exc}") from None
