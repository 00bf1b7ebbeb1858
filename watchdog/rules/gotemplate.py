"""A Go ``text/template`` interpreter (Go 1.19 semantics), for Prometheus alert labels and annotations.

Contract:
- :func:`parse` accepts what Go's ``text/template`` parser accepts (actions, pipelines, ``$var :=`` and
  ``$var =``, ``if``/``else if``/``else``/``end``, ``with``, ``range`` with ``break``/``continue``,
  comments, ``{{-``/``-}}`` trimming) and fails like Go: undefined functions and variables are parse
  errors (:class:`TemplateParseError`, message ``template: NAME:LINE: ...``). ``define``, ``template``
  and ``block`` are rejected as unsupported.
- :meth:`Template.execute` runs the tree with Go's rules for field access on maps and structs
  (``missingkey=zero``), truth, function calls with typed parameters (literal constants as Go converts
  them, so ``gt $value 1`` fails with "incompatible types for comparison" exactly as in Prometheus),
  short-circuit ``and``/``or``, and Go's printing of values. Failures raise :class:`TemplateExecError`
  with Go's message (``template: NAME:LINE:COL: executing "NAME" at <NODE>: ...``).
- Values are modelled as in :mod:`watchdog.rules.gofmt`; :class:`GoStruct` models Go structs and
  pointers to structs; :data:`MISSING` is Go's invalid ``reflect.Value`` (prints ``<no value>``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus

from watchdog.rules import gofmt


class TemplateParseError(ValueError):
    """A template Go would refuse to parse."""


class TemplateExecError(RuntimeError):
    """A template that failed while executing (Go's ``error executing template``)."""


class FuncError(Exception):
    """Raised by template functions; reported as ``error calling NAME: MESSAGE``."""


class _Missing:
    """Go's invalid reflect.Value (no value at all)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class _MissingArg:
    """Marker for 'no final pipeline value' (Go's missingVal)."""


_NO_FINAL: Any = _MissingArg()


class GoStruct:
    """A Go struct value (or pointer to struct when ``pointer``): named fields, Go type name."""

    def __init__(self, fields: Mapping[str, Any], go_type: str, pointer: bool = False) -> None:
        self.fields = dict(fields)
        self.GO_TYPE = go_type
        self.pointer = pointer

    def go_string(self) -> str:
        body = "{" + " ".join(gofmt.format_value(v) for v in self.fields.values()) + "}"
        return ("&" if self.pointer else "") + body


@dataclass(frozen=True)
class GoFunc:
    """A template function: Python callable plus Go parameter types (``any``, ``string``, ``float64``,
    ``int``, ``bool``, ``value`` for reflect.Value, or a Go type name checked by ``GO_TYPE``)."""

    fn: Callable[..., Any]
    params: tuple[str, ...] = ()
    variadic: str | None = None


# ---------------------------------------------------------------------------------------------- lexer

_SPACE = " \t\r\n"
_KEYWORDS = {"block", "break", "continue", "define", "else", "end", "if", "range", "nil", "template", "with"}


@dataclass(frozen=True)
class _Tok:
    kind: str  # text ldelim rdelim space ident field var string raw char number bool nil dot pipe
    #            lparen rparen assign declare comma keyword eof
    val: str
    pos: int


def _alnum(ch: str) -> bool:
    return ch == "_" or ch.isalnum()


_NUMBER_RE = re.compile(
    r"[+-]?(?:0[xX][0-9a-fA-F_]*(?:\.[0-9a-fA-F_]*)?(?:[pP][+-]?[0-9_]+)?"
    r"|0[oObB][0-9_]+"
    r"|(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?(?:[eE][+-]?[0-9_]+)?)i?"
)


class _Lexer:
    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.name = name
        self.toks: list[_Tok] = []

    def line_of(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def fail(self, pos: int, msg: str) -> TemplateParseError:
        return TemplateParseError(f"template: {self.name}:{self.line_of(pos)}: {msg}")

    def run(self) -> list[_Tok]:
        text = self.text
        pos = 0
        n = len(text)
        trim_next = False
        while pos <= n:
            start = text.find("{{", pos)
            end_text = n if start < 0 else start
            chunk = text[pos:end_text]
            chunk_pos = pos
            if trim_next:
                stripped = chunk.lstrip(_SPACE)
                chunk_pos += len(chunk) - len(stripped)
                chunk = stripped
                trim_next = False
            if start < 0:
                if chunk:
                    self.toks.append(_Tok("text", chunk, chunk_pos))
                break
            left_trim = text.startswith("-", start + 2) and start + 3 < n and text[start + 3] in _SPACE
            if left_trim:
                chunk = chunk.rstrip(_SPACE)
            if chunk:
                self.toks.append(_Tok("text", chunk, chunk_pos))
            inner = start + 2 + (2 if left_trim else 0)
            if text.startswith("/*", inner):
                close = text.find("*/", inner + 2)
                if close < 0:
                    raise self.fail(start, "unclosed comment")
                after = close + 2
                if text.startswith(" -}}", after):
                    pos, trim_next = after + 4, True
                elif text.startswith("}}", after):
                    pos = after + 2
                else:
                    raise self.fail(start, "comment ends before closing delimiter")
                continue
            self.toks.append(_Tok("ldelim", "{{", start))
            pos, trim_next = self.lex_action(inner)
        self.toks.append(_Tok("eof", "", n))
        return self.toks

    def lex_action(self, pos: int) -> tuple[int, bool]:
        """Lex inside ``{{ }}`` from ``pos``; returns the position after ``}}`` and the right-trim flag."""
        text = self.text
        n = len(text)
        depth = 0
        while True:
            if text.startswith(" -}}", pos) or text.startswith("\t-}}", pos) or \
                    text.startswith("\n-}}", pos) or text.startswith("\r-}}", pos):
                if depth:
                    raise self.fail(pos, "unclosed left paren")
                self.toks.append(_Tok("rdelim", "}}", pos + 2))
                return pos + 4, True
            if text.startswith("}}", pos):
                if depth:
                    raise self.fail(pos, "unclosed left paren")
                self.toks.append(_Tok("rdelim", "}}", pos))
                return pos + 2, False
            if pos >= n:
                raise self.fail(pos, "unclosed action")
            ch = text[pos]
            if ch in _SPACE:
                start = pos
                while pos < n and text[pos] in _SPACE:
                    pos += 1
                # A space followed by "-}}" is the trim marker: keep one space for it.
                if text.startswith("-}}", pos):
                    pos -= 1
                    if pos == start:
                        continue
                self.toks.append(_Tok("space", text[start:pos], start))
                continue
            if ch == "=":
                self.toks.append(_Tok("assign", "=", pos))
                pos += 1
            elif ch == ":":
                if not text.startswith(":=", pos):
                    raise self.fail(pos, "expected :=")
                self.toks.append(_Tok("declare", ":=", pos))
                pos += 2
            elif ch == "|":
                self.toks.append(_Tok("pipe", "|", pos))
                pos += 1
            elif ch == '"':
                end = pos + 1
                while True:
                    if end >= n or text[end] == "\n":
                        raise self.fail(pos, "unterminated quoted string")
                    if text[end] == "\\":
                        end += 2
                        continue
                    if text[end] == '"':
                        break
                    end += 1
                self.toks.append(_Tok("string", text[pos:end + 1], pos))
                pos = end + 1
            elif ch == "`":
                end = text.find("`", pos + 1)
                if end < 0:
                    raise self.fail(pos, "unterminated raw quoted string")
                self.toks.append(_Tok("raw", text[pos:end + 1], pos))
                pos = end + 1
            elif ch == "'":
                end = pos + 1
                while True:
                    if end >= n or text[end] == "\n":
                        raise self.fail(pos, "unterminated character constant")
                    if text[end] == "\\":
                        end += 2
                        continue
                    if text[end] == "'":
                        break
                    end += 1
                self.toks.append(_Tok("char", text[pos:end + 1], pos))
                pos = end + 1
            elif ch == "$":
                end = pos + 1
                while end < n and _alnum(text[end]):
                    end += 1
                self.toks.append(_Tok("var", text[pos:end], pos))
                pos = self.check_terminator(end)
            elif ch == "." and pos + 1 < n and text[pos + 1].isdigit():
                pos = self.lex_number(pos)
            elif ch == ".":
                end = pos + 1
                while end < n and _alnum(text[end]):
                    end += 1
                if end == pos + 1:
                    self.toks.append(_Tok("dot", ".", pos))
                else:
                    self.toks.append(_Tok("field", text[pos:end], pos))
                pos = self.check_terminator(end)
            elif ch in "+-" or ch.isdigit():
                pos = self.lex_number(pos)
            elif _alnum(ch):
                end = pos
                while end < n and _alnum(text[end]):
                    end += 1
                word = text[pos:end]
                if word in ("true", "false"):
                    self.toks.append(_Tok("bool", word, pos))
                elif word == "nil":
                    self.toks.append(_Tok("nil", word, pos))
                elif word in _KEYWORDS:
                    self.toks.append(_Tok("keyword", word, pos))
                else:
                    self.toks.append(_Tok("ident", word, pos))
                pos = self.check_terminator(end)
            elif ch == "(":
                depth += 1
                self.toks.append(_Tok("lparen", "(", pos))
                pos += 1
            elif ch == ")":
                depth -= 1
                if depth < 0:
                    raise self.fail(pos, "unexpected right paren")
                self.toks.append(_Tok("rparen", ")", pos))
                pos += 1
            elif ch == ",":
                self.toks.append(_Tok("comma", ",", pos))
                pos += 1
            else:
                raise self.fail(pos, f"unrecognized character in action: {ch!r}")

    def check_terminator(self, pos: int) -> int:
        text = self.text
        if pos >= len(text) or text[pos] in _SPACE + ".,|:)(" or text.startswith("}}", pos):
            return pos
        raise self.fail(pos, f"bad character {text[pos]!r}")

    def lex_number(self, pos: int) -> int:
        match = _NUMBER_RE.match(self.text, pos)
        end = match.end() if match else pos
        if end == pos or (end < len(self.text) and _alnum(self.text[end])):
            bad_end = end + 1
            raise self.fail(pos, f"bad number syntax: {self.text[pos:bad_end]!r}")
        self.toks.append(_Tok("number", self.text[pos:end], pos))
        return end


# ---------------------------------------------------------------------------------------------- nodes


@dataclass
class _Node:
    pos: int


@dataclass
class TextNode(_Node):
    text: str


@dataclass
class DotNode(_Node):
    def __str__(self) -> str:
        return "."


@dataclass
class NilNode(_Node):
    def __str__(self) -> str:
        return "nil"


@dataclass
class BoolNode(_Node):
    value: bool

    def __str__(self) -> str:
        return "true" if self.value else "false"


@dataclass
class NumberNode(_Node):
    text: str
    is_int: bool = False
    is_float: bool = False
    int_value: int = 0
    float_value: float = 0.0
    is_char: bool = False

    def __str__(self) -> str:
        return self.text


@dataclass
class StringNode(_Node):
    quoted: str
    text: str

    def __str__(self) -> str:
        return self.quoted


@dataclass
class IdentifierNode(_Node):
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass
class VariableNode(_Node):
    ident: list[str]

    def __str__(self) -> str:
        return ".".join(self.ident)


@dataclass
class FieldNode(_Node):
    ident: list[str]

    def __str__(self) -> str:
        return "".join("." + i for i in self.ident)


@dataclass
class ChainNode(_Node):
    node: _Node
    fields: list[str]

    def __str__(self) -> str:
        inner = str(self.node)
        if isinstance(self.node, PipeNode):
            inner = f"({inner})"
        return inner + "".join("." + f for f in self.fields)


@dataclass
class CommandNode(_Node):
    args: list[_Node] = field(default_factory=list)

    def __str__(self) -> str:
        return " ".join(f"({a})" if isinstance(a, PipeNode) else str(a) for a in self.args)


@dataclass
class PipeNode(_Node):
    decl: list[VariableNode] = field(default_factory=list)
    is_assign: bool = False
    cmds: list[CommandNode] = field(default_factory=list)

    def __str__(self) -> str:
        out = ""
        if self.decl:
            out = ", ".join(str(v) for v in self.decl) + (" = " if self.is_assign else " := ")
        return out + " | ".join(str(c) for c in self.cmds)


@dataclass
class ActionNode(_Node):
    pipe: PipeNode

    def __str__(self) -> str:
        return "{{" + str(self.pipe) + "}}"


@dataclass
class ListNode(_Node):
    nodes: list[_Node] = field(default_factory=list)


@dataclass
class BranchNode(_Node):
    kind: str  # if with range
    pipe: PipeNode
    body: ListNode
    else_body: ListNode | None

    def __str__(self) -> str:
        return "{{" + self.kind + " " + str(self.pipe) + "}}"


@dataclass
class BreakNode(_Node):
    def __str__(self) -> str:
        return "{{break}}"


@dataclass
class ContinueNode(_Node):
    def __str__(self) -> str:
        return "{{continue}}"


@dataclass
class _EndNode(_Node):
    pass


@dataclass
class _ElseNode(_Node):
    pass


# ---------------------------------------------------------------------------------------------- parser

_GO_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\",
               "'": "'", '"': '"'}


def go_unquote(quoted: str) -> str:
    """``strconv.Unquote`` for "..." and `...` literals; raises ValueError on bad escapes."""
    if quoted.startswith("`"):
        return quoted[1:-1]
    body = quoted[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        i += 1
        if i >= len(body):
            raise ValueError("invalid syntax")
        esc = body[i]
        if esc in _GO_ESCAPES:
            if esc == "'" and quoted[0] == '"':
                raise ValueError("invalid syntax")
            out.append(_GO_ESCAPES[esc])
            i += 1
        elif esc == "x":
            out.append(chr(int(body[i + 1:i + 3], 16)))
            i += 3
        elif esc == "u":
            out.append(chr(int(body[i + 1:i + 5], 16)))
            i += 5
        elif esc == "U":
            out.append(chr(int(body[i + 1:i + 9], 16)))
            i += 9
        elif esc in "01234567":
            out.append(chr(int(body[i:i + 3], 8)))
            i += 3
        else:
            raise ValueError("invalid syntax")
    return "".join(out)


def _parse_go_int(text: str) -> int | None:
    """``strconv.ParseInt(text, 0, 64)``: decimal, 0x, 0o, 0b, leading-0 octal, underscores."""
    body = text.lstrip("+-")
    sign = -1 if text.startswith("-") else 1
    if not body:
        return None
    if "_" in body:
        if not re.fullmatch(r"(0[xXoObB]_?)?[0-9a-fA-F]+(_[0-9a-fA-F]+)*", body):
            return None
        body = body.replace("_", "")
    try:
        low = body.lower()
        if low.startswith("0x"):
            value = int(body[2:], 16)
        elif low.startswith("0o"):
            value = int(body[2:], 8)
        elif low.startswith("0b"):
            value = int(body[2:], 2)
        elif len(body) > 1 and body.startswith("0"):
            value = int(body[1:], 8)
        else:
            value = int(body, 10)
    except ValueError:
        return None
    value *= sign
    return value if -(1 << 63) <= value < (1 << 63) else None


def _make_number(tok: _Tok, lexer: _Lexer) -> NumberNode:
    text = tok.val
    node = NumberNode(tok.pos, text)
    if tok.kind == "char":
        try:
            rune = go_unquote('"' + text[1:-1].replace('"', '\\"') + '"')
        except ValueError as exc:
            raise lexer.fail(tok.pos, f"malformed character constant: {text}") from exc
        if len(rune) != 1:
            raise lexer.fail(tok.pos, f"malformed character constant: {text}")
        node.is_char = node.is_int = node.is_float = True
        node.int_value = ord(rune)
        node.float_value = float(node.int_value)
        return node
    if text.endswith("i"):
        raise lexer.fail(tok.pos, f"complex constants are not supported: {text}")
    as_int = _parse_go_int(text)
    if as_int is not None:
        node.is_int = node.is_float = True
        node.int_value = as_int
        node.float_value = float(as_int)
        return node
    try:
        value = parse_go_float(text)
    except ValueError as exc:
        raise lexer.fail(tok.pos, f"illegal number syntax: {text!r}") from exc
    if not any(c in text for c in ".eEpP"):
        raise lexer.fail(tok.pos, f"integer overflow: {text!r}")
    node.is_float = True
    node.float_value = value
    if value.is_integer() and -(1 << 63) <= value < (1 << 63):
        node.is_int = True
        node.int_value = int(value)
    return node


_GO_FLOAT_RE = re.compile(
    r"[+-]?(?:(?:inf|infinity|nan)"
    r"|(?:[0-9](?:_?[0-9])*(?:\.(?:[0-9](?:_?[0-9])*)?)?|\.[0-9](?:_?[0-9])*)(?:[eE][+-]?[0-9]+)?"
    r"|0[xX](?:[0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)",
    re.IGNORECASE,
)


def parse_go_float(text: str) -> float:
    """``strconv.ParseFloat(text, 64)``; raises ValueError("strconv.ParseFloat: ...")."""
    if not _GO_FLOAT_RE.fullmatch(text):
        raise ValueError(f'strconv.ParseFloat: parsing {gofmt.go_quote(text)}: invalid syntax')
    body = text.replace("_", "")
    low = body.lower().lstrip("+-")
    value = float.fromhex(body) if low.startswith("0x") else float(body)
    if value in (float("inf"), float("-inf")) and "inf" not in low:
        raise ValueError(f'strconv.ParseFloat: parsing {gofmt.go_quote(text)}: value out of range')
    return value


class _Parser:
    def __init__(self, text: str, name: str, funcs: Mapping[str, Any]) -> None:
        self.lexer = _Lexer(text, name)
        self.toks = self.lexer.run()
        self.i = 0
        self.funcs = funcs
        self.vars: list[str] = ["$"]
        self.range_depth = 0

    # token helpers
    def next(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def backup(self, count: int = 1) -> None:
        self.i -= count

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next_non_space(self) -> _Tok:
        tok = self.next()
        while tok.kind == "space":
            tok = self.next()
        return tok

    def peek_non_space(self) -> _Tok:
        tok = self.next_non_space()
        self.backup()
        return tok

    def fail(self, tok: _Tok, msg: str) -> TemplateParseError:
        return self.lexer.fail(tok.pos, msg)

    def unexpected(self, tok: _Tok, context: str) -> TemplateParseError:
        shown = "EOF" if tok.kind == "eof" else f'"{tok.val}"'
        return self.fail(tok, f"unexpected {shown} in {context}")

    # grammar
    def parse(self) -> ListNode:
        root = ListNode(0)
        while self.peek().kind != "eof":
            node = self.text_or_action()
            if isinstance(node, (_EndNode, _ElseNode)):
                which = "{{end}}" if isinstance(node, _EndNode) else "{{else}}"
                raise self.fail(self.toks[self.i - 1], f"unexpected {which}")
            root.nodes.append(node)
        return root

    def text_or_action(self) -> _Node:
        tok = self.next_non_space()
        if tok.kind == "text":
            return TextNode(tok.pos, tok.val)
        if tok.kind == "ldelim":
            return self.action()
        raise self.unexpected(tok, "input")

    def action(self) -> _Node:
        tok = self.next_non_space()
        if tok.kind == "keyword":
            word = tok.val
            if word == "if":
                return self.control("if", tok)
            if word == "with":
                return self.control("with", tok)
            if word == "range":
                return self.control("range", tok)
            if word == "end":
                self.expect_rdelim("end")
                return _EndNode(tok.pos)
            if word == "else":
                if self.peek_non_space().kind == "keyword" and self.peek_non_space().val == "if":
                    return _ElseNode(tok.pos)
                self.expect_rdelim("else")
                return _ElseNode(tok.pos)
            if word in ("break", "continue"):
                if self.range_depth == 0:
                    raise self.fail(tok, f"{{{{{word}}}}} outside {{{{range}}}}")
                self.expect_rdelim(word)
                return BreakNode(tok.pos) if word == "break" else ContinueNode(tok.pos)
            if word in ("define", "template", "block"):
                raise self.fail(tok, f"{{{{{word}}}}} is not supported in alert templates")
        self.backup()
        first = self.peek()
        return ActionNode(first.pos, self.pipeline("command", "rdelim"))

    def expect_rdelim(self, context: str) -> _Tok:
        tok = self.next_non_space()
        if tok.kind != "rdelim":
            raise self.unexpected(tok, context)
        return tok

    def control(self, kind: str, tok: _Tok) -> BranchNode:
        mark = len(self.vars)
        try:
            pipe = self.pipeline(kind, "rdelim")
            if kind == "range":
                self.range_depth += 1
            body, nxt = self.item_list()
            if kind == "range":
                self.range_depth -= 1
            else_body: ListNode | None = None
            if isinstance(nxt, _ElseNode):
                if kind == "if" and self.peek_non_space().kind == "keyword" and \
                        self.peek_non_space().val == "if":
                    if_tok = self.next_non_space()
                    else_body = ListNode(nxt.pos, [self.control("if", if_tok)])
                else:
                    else_body, nxt2 = self.item_list()
                    if not isinstance(nxt2, _EndNode):
                        raise self.fail(tok, "expected end; found {{else}}")
            return BranchNode(pipe.pos, kind, pipe, body, else_body)
        finally:
            del self.vars[mark:]

    def item_list(self) -> tuple[ListNode, _Node]:
        lst = ListNode(self.peek_non_space().pos)
        while self.peek_non_space().kind != "eof":
            node = self.text_or_action()
            if isinstance(node, (_EndNode, _ElseNode)):
                return lst, node
            lst.nodes.append(node)
        raise self.fail(self.peek(), "unexpected EOF")

    def pipeline(self, context: str, end: str) -> PipeNode:
        first = self.peek_non_space()
        pipe = PipeNode(first.pos)
        while True:  # declarations
            var = self.peek_non_space()
            if var.kind != "var":
                break
            save = self.i
            self.next()
            nxt = self.peek_non_space()
            if nxt.kind in ("assign", "declare"):
                pipe.is_assign = nxt.kind == "assign"
                self.next_non_space()
                pipe.decl.append(VariableNode(var.pos, [var.val]))
                if pipe.is_assign:
                    if var.val not in self.vars:
                        raise self.fail(var, f'undefined variable "{var.val}"')
                else:
                    self.vars.append(var.val)
                break
            if nxt.kind == "comma":
                self.next_non_space()
                pipe.decl.append(VariableNode(var.pos, [var.val]))
                self.vars.append(var.val)
                if context == "range" and len(pipe.decl) < 2:
                    if self.peek_non_space().kind in ("var", "rdelim", "rparen"):
                        continue
                    raise self.fail(nxt, "range can only initialize variables")
                raise self.fail(nxt, f"too many declarations in {context}")
            self.i = save  # not a declaration: the variable is an operand
            break
        while True:
            tok = self.next_non_space()
            if tok.kind == end:
                self.check_pipeline(pipe, context, tok)
                return pipe
            if tok.kind in ("bool", "char", "dot", "field", "ident", "number", "nil", "raw", "string",
                            "var", "lparen"):
                self.backup()
                pipe.cmds.append(self.command())
            else:
                raise self.unexpected(tok, context)

    def check_pipeline(self, pipe: PipeNode, context: str, tok: _Tok) -> None:
        if not pipe.cmds:
            raise self.fail(tok, f"missing value for {context}")
        for i, cmd in enumerate(pipe.cmds[1:]):
            if isinstance(cmd.args[0], (BoolNode, DotNode, NilNode, NumberNode, StringNode)):
                raise self.fail(tok, f"non executable command in pipeline stage {i + 2}")

    def command(self) -> CommandNode:
        cmd = CommandNode(self.peek_non_space().pos)
        while True:
            self.peek_non_space()
            operand = self.operand()
            if operand is not None:
                cmd.args.append(operand)
            tok = self.next()
            if tok.kind == "space":
                continue
            if tok.kind in ("rdelim", "rparen"):
                self.backup()
            elif tok.kind != "pipe":
                raise self.unexpected(tok, "operand")
            break
        if not cmd.args:
            raise self.fail(self.peek(), "empty command")
        return cmd

    def operand(self) -> _Node | None:
        node = self.term()
        if node is None:
            return None
        if self.peek().kind == "field":
            chain_pos = self.peek().pos
            fields: list[str] = []
            while self.peek().kind == "field":
                fields.append(self.next().val[1:])
            if isinstance(node, FieldNode):
                return FieldNode(chain_pos, node.ident + fields)
            if isinstance(node, VariableNode):
                return VariableNode(chain_pos, node.ident + fields)
            if isinstance(node, (BoolNode, StringNode, NumberNode, NilNode, DotNode)):
                raise self.lexer.fail(chain_pos, f"unexpected . after term {str(node)!r}".replace(
                    "'", '"'))
            return ChainNode(chain_pos, node, fields)
        return node

    def term(self) -> _Node | None:
        tok = self.next_non_space()
        kind = tok.kind
        if kind == "ident":
            if tok.val not in self.funcs:
                raise self.fail(tok, f'function "{tok.val}" not defined')
            return IdentifierNode(tok.pos, tok.val)
        if kind == "dot":
            return DotNode(tok.pos)
        if kind == "nil":
            return NilNode(tok.pos)
        if kind == "var":
            if tok.val not in self.vars:
                raise self.fail(tok, f'undefined variable "{tok.val}"')
            return VariableNode(tok.pos, [tok.val])
        if kind == "field":
            return FieldNode(tok.pos, [tok.val[1:]])
        if kind == "bool":
            return BoolNode(tok.pos, tok.val == "true")
        if kind in ("number", "char"):
            return _make_number(tok, self.lexer)
        if kind == "lparen":
            return self.pipeline("parenthesized pipeline", "rparen")
        if kind in ("string", "raw"):
            try:
                return StringNode(tok.pos, tok.val, go_unquote(tok.val))
            except ValueError as exc:
                raise self.fail(tok, "invalid syntax") from exc
        self.backup()
        return None


# ---------------------------------------------------------------------------------------------- exec


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


def truth(value: Any) -> bool:
    """Go template truth: false, 0, nil, empty string/map/slice, and no value are false."""
    if value is MISSING or value is None:
        return False
    if isinstance(value, (bool, int, float)):
        return bool(value)
    if isinstance(value, (str, dict, list)):
        return len(value) > 0
    return True


@dataclass
class Template:
    """A parsed template: call :meth:`execute` with the data (dot) and the function map."""

    name: str
    text: str
    root: ListNode

    def execute(self, data: Any, funcs: Mapping[str, GoFunc]) -> str:
        """Run the template; raises :class:`TemplateExecError` with Go's message."""
        state = _State(self, funcs)
        state.vars.append(("$", data))
        out: list[str] = []
        state.out = out
        state.walk(data, self.root)
        return "".join(out)


def parse(text: str, name: str, funcs: Mapping[str, Any]) -> Template:
    """Parse ``text`` as Go's ``text/template`` would, with ``funcs`` (names) defined."""
    parser = _Parser(text, name, {**BUILTIN_FUNCS, **funcs})
    return Template(name, text, parser.parse())


class _State:
    def __init__(self, tmpl: Template, funcs: Mapping[str, GoFunc]) -> None:
        self.tmpl = tmpl
        self.funcs = {**BUILTIN_FUNCS, **funcs}
        self.vars: list[tuple[str, Any]] = []
        self.node: _Node | None = None
        self.out: list[str] = []

    def at(self, node: _Node) -> None:
        self.node = node

    def errorf(self, msg: str) -> TemplateExecError:
        name = self.tmpl.name
        if self.node is None:
            return TemplateExecError(f"template: {name}: {msg}")
        prefix = self.tmpl.text[: self.node.pos]
        line = prefix.count("\n") + 1
        last_nl = prefix.rfind("\n")
        col_text = prefix if last_nl < 0 else prefix[last_nl + 1:]
        col = len(col_text.encode("utf-8"))
        context = str(self.node)
        return TemplateExecError(f'template: {name}:{line}:{col}: executing "{name}" at <{context}>: {msg}')

    # variables
    def var_value(self, name: str) -> Any:
        for var_name, value in reversed(self.vars):
            if var_name == name:
                return value
        raise self.errorf(f"undefined variable: {name}")

    def set_var(self, name: str, value: Any) -> None:
        for i in range(len(self.vars) - 1, -1, -1):
            if self.vars[i][0] == name:
                self.vars[i] = (name, value)
                return
        raise self.errorf(f"undefined variable: {name}")

    def set_top_var(self, n: int, value: Any) -> None:
        name = self.vars[len(self.vars) - n][0]
        self.vars[len(self.vars) - n] = (name, value)

    # walking
    def walk(self, dot: Any, node: _Node) -> None:
        self.at(node)
        if isinstance(node, ActionNode):
            value = self.eval_pipeline(dot, node.pipe)
            if not node.pipe.decl:
                self.print_value(node, value)
        elif isinstance(node, ListNode):
            for child in node.nodes:
                self.walk(dot, child)
        elif isinstance(node, TextNode):
            self.out.append(node.text)
        elif isinstance(node, BranchNode):
            if node.kind == "range":
                self.walk_range(dot, node)
            else:
                mark = len(self.vars)
                try:
                    value = self.eval_pipeline(dot, node.pipe)
                    if truth(value):
                        self.walk(value if node.kind == "with" else dot, node.body)
                    elif node.else_body is not None:
                        self.walk(dot, node.else_body)
                finally:
                    del self.vars[mark:]
        elif isinstance(node, BreakNode):
            raise _Break()
        elif isinstance(node, ContinueNode):
            raise _Continue()
        else:  # pragma: no cover - the parser produces no other node kinds
            raise self.errorf(f"unknown node: {node}")

    def walk_range(self, dot: Any, node: BranchNode) -> None:
        mark_outer = len(self.vars)
        try:
            value = self.eval_pipeline(dot, node.pipe)
            if isinstance(value, GoStruct) and value.pointer:
                value = value
            items: list[tuple[Any, Any]]
            if isinstance(value, list):
                items = list(enumerate(value))
            elif isinstance(value, dict):
                items = [(k, value[k]) for k in sorted(value)]
            elif value is MISSING or value is None:
                items = []
            else:
                raise self.errorf(f"range can't iterate over {gofmt.format_value(value)}")
            mark = len(self.vars)
            try:
                for index, elem in items:
                    if node.pipe.decl:
                        self.set_top_var(1, elem)
                    if len(node.pipe.decl) > 1:
                        self.set_top_var(2, index)
                    try:
                        self.walk(elem, node.body)
                    except _Continue:
                        pass
                    finally:
                        del self.vars[mark:]
            except _Break:
                return
            if not items and node.else_body is not None:
                self.walk(dot, node.else_body)
        finally:
            del self.vars[mark_outer:]

    def print_value(self, node: _Node, value: Any) -> None:
        self.at(node)
        if value is MISSING:
            self.out.append("<no value>")
        elif callable(value) and not isinstance(value, GoStruct):
            raise self.errorf(f"can't print {node} of type func")
        else:
            self.out.append(gofmt.format_value(value))

    def eval_pipeline(self, dot: Any, pipe: PipeNode) -> Any:
        self.at(pipe)
        value: Any = _NO_FINAL
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, value)
        for var in pipe.decl:
            if pipe.is_assign:
                self.set_var(var.ident[0], value)
            else:
                self.vars.append((var.ident[0], value))
        return value

    def not_a_function(self, args: list[_Node], final: Any) -> None:
        if len(args) > 1 or final is not _NO_FINAL:
            raise self.errorf(f"can't give argument to non-function {args[0]}")

    def eval_command(self, dot: Any, cmd: CommandNode, final: Any) -> Any:
        first = cmd.args[0]
        if isinstance(first, FieldNode):
            self.at(first)
            return self.eval_field_chain(dot, dot, first, first.ident, cmd.args, final)
        if isinstance(first, ChainNode):
            return self.eval_chain(dot, first, cmd.args, final)
        if isinstance(first, IdentifierNode):
            return self.eval_function(dot, first, cmd, cmd.args, final)
        if isinstance(first, PipeNode):
            self.not_a_function(cmd.args, final)
            return self.eval_pipeline(dot, first)
        if isinstance(first, VariableNode):
            return self.eval_variable(dot, first, cmd.args, final)
        self.at(first)
        self.not_a_function(cmd.args, final)
        if isinstance(first, BoolNode):
            return first.value
        if isinstance(first, DotNode):
            return dot
        if isinstance(first, NilNode):
            raise self.errorf("nil is not a command")
        if isinstance(first, NumberNode):
            return self.ideal_constant(first)
        if isinstance(first, StringNode):
            return first.text
        raise self.errorf(f"can't evaluate command {str(first)!r}")

    def ideal_constant(self, node: NumberNode) -> Any:
        self.at(node)
        text = node.text
        is_hex = text.lstrip("+-").lower().startswith("0x")
        if node.is_float and not is_hex and not node.is_char and any(c in text for c in ".eEpP"):
            return node.float_value
        if node.is_int:
            return node.int_value
        raise self.errorf(f"{text} overflows int")

    def eval_chain(self, dot: Any, chain: ChainNode, args: list[_Node], final: Any) -> Any:
        self.at(chain)
        if isinstance(chain.node, NilNode):
            raise self.errorf(f"indirection through explicit nil in {chain}")
        receiver = self.eval_arg(dot, None, chain.node)
        return self.eval_field_chain(dot, receiver, chain, chain.fields, args, final)

    def eval_variable(self, dot: Any, var: VariableNode, args: list[_Node] | None, final: Any) -> Any:
        self.at(var)
        value = self.var_value(var.ident[0])
        if len(var.ident) == 1:
            self.not_a_function(args or [var], final)
            return value
        return self.eval_field_chain(dot, value, var, var.ident[1:], args, final)

    def eval_field_chain(self, dot: Any, receiver: Any, node: _Node, ident: list[str],
                         args: list[_Node] | None, final: Any) -> Any:
        for name in ident[:-1]:
            receiver = self.eval_field(name, None, _NO_FINAL, receiver)
        return self.eval_field(ident[-1], args, final, receiver)

    def eval_field(self, name: str, args: list[_Node] | None, final: Any, receiver: Any) -> Any:
        if receiver is MISSING:
            return MISSING
        has_args = (args is not None and len(args) > 1) or final is not _NO_FINAL
        if isinstance(receiver, GoStruct):
            if name in receiver.fields:
                if has_args:
                    raise self.errorf(f"{name} has arguments but cannot be invoked as function")
                return receiver.fields[name]
            raise self.errorf(f"can't evaluate field {name} in type {receiver.GO_TYPE}")
        if isinstance(receiver, dict):
            if has_args:
                raise self.errorf(f"{name} is not a method but has arguments")
            return receiver[name] if name in receiver else _map_zero(receiver)
        if receiver is None:
            raise self.errorf(f"nil pointer evaluating interface {{}}.{name}")
        raise self.errorf(f"can't evaluate field {name} in type {gofmt.go_type(receiver)}")

    def eval_function(self, dot: Any, ident: IdentifierNode, cmd: _Node, args: list[_Node] | None,
                      final: Any) -> Any:
        self.at(ident)
        func = self.funcs.get(ident.name)
        if func is None:
            raise self.errorf(f'"{ident.name}" is not a defined function')
        return self.eval_call(dot, func, cmd, ident.name, args, final)

    def eval_call(self, dot: Any, func: GoFunc, node: _Node, name: str, args: list[_Node] | None,
                  final: Any) -> Any:
        call_args = list(args[1:]) if args else []
        num_in = len(call_args) + (0 if final is _NO_FINAL else 1)
        n_params = len(func.params) + (1 if func.variadic is not None else 0)
        if func.variadic is not None:
            if num_in < len(func.params):
                raise self.errorf(
                    f"wrong number of args for {name}: want at least {len(func.params)} got {len(call_args)}")
        elif num_in != n_params:
            raise self.errorf(f"wrong number of args for {name}: want {n_params} got {num_in}")
        if name in ("and", "or") and func is BUILTIN_FUNCS[name]:
            value: Any = MISSING
            for arg in call_args:
                value = self.eval_arg(dot, "value", arg)
                if truth(value) == (name == "or"):
                    return value
            if final is not _NO_FINAL:
                value = self.validate_type(final, "value")
            return value
        argv: list[Any] = []
        for i, arg in enumerate(call_args):
            typ = func.params[i] if i < len(func.params) else func.variadic
            argv.append(self.eval_arg(dot, typ, arg))
        if final is not _NO_FINAL:
            if func.variadic is not None and num_in - 1 >= len(func.params):
                typ = func.variadic
            else:
                typ = func.params[num_in - 1] if func.params else func.variadic
            argv.append(self.validate_type(final, typ))
        try:
            return func.fn(*argv)
        except FuncError as exc:
            self.at(node)
            raise self.errorf(f"error calling {name}: {exc}") from exc

    def validate_type(self, value: Any, typ: str | None) -> Any:
        if value is MISSING:
            if typ is None or typ == "any":
                return None
            if typ in ("value",):
                raise self.errorf("invalid value; expected reflect.Value")
            raise self.errorf(f"invalid value; expected {typ}")
        if typ in (None, "any", "value"):
            return value
        actual = gofmt.go_type(value)
        if typ == "string" and isinstance(value, str) and actual == "string":
            return value
        if typ == "float64" and isinstance(value, float):
            return value
        if typ == "int" and isinstance(value, int) and not isinstance(value, bool):
            return value
        if typ == "bool" and isinstance(value, bool):
            return value
        if typ == actual:
            return value
        raise self.errorf(f"wrong type for value; expected {typ}; got {actual}")

    def eval_arg(self, dot: Any, typ: str | None, node: _Node) -> Any:
        self.at(node)
        if isinstance(node, DotNode):
            return self.validate_type(dot, typ)
        if isinstance(node, NilNode):
            if typ in (None, "any") or (typ is not None and typ not in ("string", "float64", "int", "bool",
                                                                       "value")):
                return None
            raise self.errorf(f"cannot assign nil to {'reflect.Value' if typ == 'value' else typ}")
        if isinstance(node, FieldNode):
            return self.validate_type(
                self.eval_field_chain(dot, dot, node, node.ident, [node], _NO_FINAL), typ)
        if isinstance(node, VariableNode):
            return self.validate_type(self.eval_variable(dot, node, None, _NO_FINAL), typ)
        if isinstance(node, PipeNode):
            return self.validate_type(self.eval_pipeline(dot, node), typ)
        if isinstance(node, IdentifierNode):
            return self.validate_type(self.eval_function(dot, node, node, None, _NO_FINAL), typ)
        if isinstance(node, ChainNode):
            return self.validate_type(self.eval_chain(dot, node, [], _NO_FINAL), typ)
        if typ in (None, "any", "value"):
            if isinstance(node, BoolNode):
                return node.value
            if isinstance(node, NumberNode):
                return self.ideal_constant(node)
            if isinstance(node, StringNode):
                return node.text
            raise self.errorf(f"can't handle assignment of {node} to empty interface argument")
        if typ == "string":
            if isinstance(node, StringNode):
                return node.text
            raise self.errorf(f"expected string; found {node}")
        if typ == "float64":
            if isinstance(node, NumberNode) and node.is_float:
                return node.float_value
            raise self.errorf(f"expected float; found {node}")
        if typ == "int":
            if isinstance(node, NumberNode) and node.is_int:
                return node.int_value
            raise self.errorf(f"expected integer; found {node}")
        if typ == "bool":
            if isinstance(node, BoolNode):
                return node.value
            raise self.errorf(f"expected bool; found {node}")
        raise self.errorf(f"can't handle {node} for arg of type {typ}")


# ---------------------------------------------------------------------------------------------- builtins

_BAD_COMPARISON_TYPE = "invalid type for comparison"
_BAD_COMPARISON = "incompatible types for comparison"


def _basic_kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return None


def _eq(arg1: Any, *rest: Any) -> bool:
    if arg1 is not MISSING and isinstance(arg1, (dict, list)):
        raise FuncError(f"uncomparable type {gofmt.go_type(arg1)}: {gofmt.format_value(arg1)}")
    if not rest:
        raise FuncError("missing argument for comparison")
    k1 = _basic_kind(arg1)
    for arg in rest:
        k2 = _basic_kind(arg)
        if k1 != k2:
            if arg1 is not MISSING and arg is not MISSING:
                raise FuncError(_BAD_COMPARISON)
            continue
        if k1 is not None:
            if arg1 == arg:
                return True
            continue
        if isinstance(arg, (dict, list)):
            raise FuncError(f"uncomparable type {gofmt.go_type(arg)}: {gofmt.format_value(arg)}")
        if arg1 is arg or (arg1 is None and arg is None):
            return True
    return False


def _lt(arg1: Any, arg2: Any) -> bool:
    k1 = _basic_kind(arg1)
    k2 = _basic_kind(arg2)
    if k1 is None or k2 is None:
        raise FuncError(_BAD_COMPARISON_TYPE)
    if k1 != k2:
        raise FuncError(_BAD_COMPARISON)
    if k1 == "bool":
        raise FuncError(_BAD_COMPARISON_TYPE)
    return bool(arg1 < arg2)


def _le(arg1: Any, arg2: Any) -> bool:
    return _lt(arg1, arg2) or _eq(arg1, arg2)


def _map_zero(mapping: dict[str, Any]) -> Any:
    """The zero value of a map's element type (missingkey=zero): "" for string maps, else nil."""
    return "" if gofmt.go_type(mapping) == "map[string]string" else None


def _index(item: Any, *indexes: Any) -> Any:
    for index in indexes:
        if item is MISSING or item is None:
            raise FuncError("index of untyped nil")
        if isinstance(item, dict):
            if not isinstance(index, str):
                raise FuncError(f"value has type {gofmt.go_type(index)}; should be string")
            item = item[index] if index in item else _map_zero(item)
        elif isinstance(item, (list, str)):
            if not isinstance(index, int) or isinstance(index, bool):
                raise FuncError(f"cannot index slice/array with type {gofmt.go_type(index)}")
            if index < 0 or index >= len(item):
                raise FuncError(f"index out of range: {index}")
            item = item[index] if isinstance(item, list) else item.encode("utf-8")[index]
        else:
            raise FuncError(f"can't index item of type {gofmt.go_type(item)}")
    return item


def _slice(item: Any, *indexes: Any) -> Any:
    if not isinstance(item, (str, list)):
        raise FuncError(f"can't slice item of type {gofmt.go_type(item)}")
    if len(indexes) > 2:
        raise FuncError(f"too many slice indexes: {len(indexes)}")
    bounds = [int(i) for i in indexes]
    start = bounds[0] if bounds else 0
    stop = bounds[1] if len(bounds) > 1 else len(item)
    if not 0 <= start <= stop <= len(item):
        raise FuncError(f"index out of range: {stop if stop > len(item) else start}")
    return item[start:stop]


def _length(item: Any) -> int:
    if isinstance(item, str):
        return len(item.encode("utf-8"))
    if isinstance(item, (dict, list)):
        return len(item)
    raise FuncError(f"len of type {gofmt.go_type(item)}")


def html_escape(text: str) -> str:
    """``template.HTMLEscapeString``."""
    return (text.replace("&", "&amp;").replace("'", "&#39;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&#34;").replace("\x00", "\ufffd"))


def _js_escape(text: str) -> str:
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == '"':
            out.append("\\\"")
        elif ch == "<":
            out.append("\\u003C")
        elif ch == ">":
            out.append("\\u003E")
        elif ch == "&":
            out.append("\\u0026")
        elif ch == "=":
            out.append("\\u003D")
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out)


def _eval_args(args: tuple[Any, ...]) -> str:
    if len(args) == 1 and isinstance(args[0], str):
        return args[0]
    return gofmt.sprint(list(args))


def _printf(fmt: str, *args: Any) -> str:
    return gofmt.sprintf(fmt, [None if a is MISSING else a for a in args])


BUILTIN_FUNCS: dict[str, GoFunc] = {
    "and": GoFunc(lambda *a: a[-1], ("value",), "value"),
    "or": GoFunc(lambda *a: a[-1], ("value",), "value"),
    "not": GoFunc(lambda a: not truth(a), ("value",)),
    "eq": GoFunc(_eq, ("value",), "value"),
    "ne": GoFunc(lambda a, b: not _eq(a, b), ("value", "value")),
    "lt": GoFunc(_lt, ("value", "value")),
    "le": GoFunc(_le, ("value", "value")),
    "gt": GoFunc(lambda a, b: not _le(a, b), ("value", "value")),
    "ge": GoFunc(lambda a, b: not _lt(a, b), ("value", "value")),
    "len": GoFunc(_length, ("value",)),
    "index": GoFunc(_index, ("value",), "value"),
    "slice": GoFunc(_slice, ("value",), "value"),
    "print": GoFunc(lambda *a: gofmt.sprint(list(a)), (), "any"),
    "printf": GoFunc(_printf, ("string",), "any"),
    "println": GoFunc(lambda *a: gofmt.sprintln(list(a)), (), "any"),
    "html": GoFunc(lambda *a: html_escape(_eval_args(a)), (), "any"),
    "js": GoFunc(lambda *a: _js_escape(_eval_args(a)), (), "any"),
    "urlquery": GoFunc(lambda *a: quote_plus(_eval_args(a), safe="~"), (), "any"),
    "call": GoFunc(lambda fn, *a: (_ for _ in ()).throw(FuncError("call of non-function")), ("value",),
                   "value"),
}
