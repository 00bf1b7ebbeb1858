"""Go ``text/template`` syntax (Go 1.19): lexer, parse tree and parser.

Contract: :func:`parse_tree` accepts what Go's ``text/template/parse`` accepts (actions, pipelines,
``$var :=``/``$var =``, ``if``/``else if``/``else``/``end``, ``with``, ``range`` with ``break``/``continue``,
comments, ``{{-``/``-}}`` trimming) and fails like Go, with :class:`TemplateParseError` messages of the
form ``template: NAME:LINE: ...``: undefined functions and variables are parse errors. ``define`` (top
level only), ``template`` and ``block`` work as in Go (:func:`parse_trees` returns the definitions).
Node positions are character offsets into the text (Go reports byte offsets;
:mod:`watchdog.golang.gotemplate` converts when it prints them).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field

from watchdog.golang import gostrconv


class TemplateParseError(ValueError):
    """A template Go would refuse to parse."""



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
class Node:
    pos: int


@dataclass
class TextNode(Node):
    text: str


@dataclass
class DotNode(Node):
    def __str__(self) -> str:
        return "."


@dataclass
class NilNode(Node):
    def __str__(self) -> str:
        return "nil"


@dataclass
class BoolNode(Node):
    value: bool

    def __str__(self) -> str:
        return "true" if self.value else "false"


@dataclass
class NumberNode(Node):
    text: str
    is_int: bool = False
    is_float: bool = False
    int_value: int = 0
    float_value: float = 0.0
    is_char: bool = False

    def __str__(self) -> str:
        return self.text


@dataclass
class StringNode(Node):
    quoted: str
    text: str

    def __str__(self) -> str:
        return self.quoted


@dataclass
class IdentifierNode(Node):
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass
class VariableNode(Node):
    ident: list[str]

    def __str__(self) -> str:
        return ".".join(self.ident)


@dataclass
class FieldNode(Node):
    ident: list[str]

    def __str__(self) -> str:
        return "".join("." + i for i in self.ident)


@dataclass
class ChainNode(Node):
    node: Node
    fields: list[str]

    def __str__(self) -> str:
        inner = str(self.node)
        if isinstance(self.node, PipeNode):
            inner = f"({inner})"
        return inner + "".join("." + f for f in self.fields)


@dataclass
class CommandNode(Node):
    args: list[Node] = field(default_factory=list)

    def __str__(self) -> str:
        return " ".join(f"({a})" if isinstance(a, PipeNode) else str(a) for a in self.args)


@dataclass
class PipeNode(Node):
    decl: list[VariableNode] = field(default_factory=list)
    is_assign: bool = False
    cmds: list[CommandNode] = field(default_factory=list)

    def __str__(self) -> str:
        out = ""
        if self.decl:
            out = ", ".join(str(v) for v in self.decl) + (" = " if self.is_assign else " := ")
        return out + " | ".join(str(c) for c in self.cmds)


@dataclass
class ActionNode(Node):
    pipe: PipeNode

    def __str__(self) -> str:
        return "{{" + str(self.pipe) + "}}"


@dataclass
class ListNode(Node):
    nodes: list[Node] = field(default_factory=list)


@dataclass
class BranchNode(Node):
    kind: str  # if with range
    pipe: PipeNode
    body: ListNode
    else_body: ListNode | None

    def __str__(self) -> str:
        return "{{" + self.kind + " " + str(self.pipe) + "}}"


@dataclass
class TemplateNode(Node):
    """``{{template "name" pipeline}}`` (also what ``{{block}}`` leaves in place)."""

    name: str
    pipe: PipeNode | None

    def __str__(self) -> str:
        tail = "" if self.pipe is None else " " + str(self.pipe)
        return "{{template " + gostrconv.quote(self.name) + tail + "}}"


@dataclass
class BreakNode(Node):
    def __str__(self) -> str:
        return "{{break}}"


@dataclass
class ContinueNode(Node):
    def __str__(self) -> str:
        return "{{continue}}"


@dataclass
class _EndNode(Node):
    pass


@dataclass
class _ElseNode(Node):
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
        value = gostrconv.parse_float(text)
    except ValueError as exc:
        raise lexer.fail(tok.pos, f"illegal number syntax: {gostrconv.quote(text)}") from exc
    if not any(c in text for c in ".eEpP"):
        raise lexer.fail(tok.pos, f"integer overflow: {gostrconv.quote(text)}")
    node.is_float = True
    node.float_value = value
    if value.is_integer() and -(1 << 63) <= value < (1 << 63):
        node.is_int = True
        node.int_value = int(value)
    return node


class _Parser:
    def __init__(self, text: str, name: str, funcs: Collection[str]) -> None:
        self.lexer = _Lexer(text, name)
        self.toks = self.lexer.run()
        self.i = 0
        self.funcs = funcs
        self.vars: list[str] = ["$"]
        self.range_depth = 0
        self.defines: dict[str, ListNode] = {}  # {{define "name"}} bodies, by name

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
            if self.peek().kind == "ldelim":  # {{define}} only at the top level, as in Go
                mark = self.i
                self.next()
                keyword = self.peek_non_space()
                if keyword.kind == "keyword" and keyword.val == "define":
                    self.next_non_space()
                    self.definition(keyword)
                    continue
                self.i = mark
            node = self.text_or_action()
            if isinstance(node, (_EndNode, _ElseNode)):
                which = "{{end}}" if isinstance(node, _EndNode) else "{{else}}"
                raise self.fail(self.toks[self.i - 1], f"unexpected {which}")
            root.nodes.append(node)
        return root

    def text_or_action(self) -> Node:
        tok = self.next_non_space()
        if tok.kind == "text":
            return TextNode(tok.pos, tok.val)
        if tok.kind == "ldelim":
            return self.action()
        raise self.unexpected(tok, "input")

    def action(self) -> Node:
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
            if word == "template":  # Go positions the node at its name
                name_pos = self.peek_non_space().pos
                name = self.template_name("template clause")
                pipe = None if self.peek_non_space().kind == "rdelim" else self.pipeline("template clause", "rdelim")
                if pipe is None:
                    self.expect_rdelim("template clause")
                return TemplateNode(name_pos, name, pipe)
            if word == "block":
                name = self.template_name("block clause")
                pipe = self.pipeline("block clause", "rdelim")
                body, end = self.item_list()
                if not isinstance(end, _EndNode):
                    raise self.fail(tok, "unexpected {{else}} in block clause")
                self.defines[name] = body
                return TemplateNode(tok.pos, name, pipe)
            if word == "define":
                raise self.unexpected(tok, "command")
        self.backup()
        first = self.peek()
        return ActionNode(first.pos, self.pipeline("command", "rdelim"))

    def template_name(self, context: str) -> str:
        tok = self.next_non_space()
        if tok.kind not in ("string", "raw"):
            raise self.unexpected(tok, context)
        try:
            return go_unquote(tok.val)
        except ValueError as exc:
            raise self.fail(tok, "invalid syntax") from exc

    def definition(self, tok: _Tok) -> None:
        """``{{define "name"}} body {{end}}`` (the ``{{define`` already read)."""
        name = self.template_name("define clause")
        self.expect_rdelim("define clause")
        saved, self.vars = self.vars, ["$"]
        try:
            body, end = self.item_list()
        finally:
            self.vars = saved
        if not isinstance(end, _EndNode):
            raise self.fail(tok, "unexpected {{else}} in define clause")
        self.defines[name] = body

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

    def item_list(self) -> tuple[ListNode, Node]:
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

    def operand(self) -> Node | None:
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

    def term(self) -> Node | None:
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


def parse_tree(text: str, name: str, func_names: Collection[str]) -> ListNode:
    """Parse ``text`` (template ``name``) with the functions ``func_names`` defined."""
    return parse_trees(text, name, func_names)[0]


def parse_trees(text: str, name: str, func_names: Collection[str]) -> tuple[ListNode, dict[str, ListNode]]:
    """:func:`parse_tree` plus the templates ``text`` defines (``{{define}}``, ``{{block}}``) by name."""
    parser = _Parser(text, name, func_names)
    root = parser.parse()
    return root, parser.defines
