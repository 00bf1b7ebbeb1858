"""Go ``text/template`` execution (Go 1.19 semantics), for Prometheus alert labels and annotations.

Contract:
- :func:`parse` parses with :mod:`watchdog.golang.gotemplate_syntax` (Go's parser rules: undefined
  functions and variables are :class:`TemplateParseError`).
- :meth:`Template.execute` runs the tree with Go's rules for field access on maps and structs
  (``missingkey=zero``), truth, function calls with typed parameters (literal constants as Go converts
  them, so ``gt $value 1`` fails with "incompatible types for comparison" exactly as in Prometheus),
  short-circuit ``and``/``or``, ``break``/``continue``, and Go's printing of values. Failures raise
  :class:`TemplateExecError` with Go's message (``template: NAME:LINE:COL: executing "NAME" at <NODE>: ...``).
- Values are modelled as in :mod:`watchdog.golang.gofmt`; :class:`GoStruct` models Go structs and
  pointers to structs; :data:`MISSING` is Go's invalid ``reflect.Value`` (prints ``<no value>``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus

from watchdog.golang import gofmt
from watchdog.golang.gotemplate_syntax import (
    ActionNode,
    BoolNode,
    BranchNode,
    BreakNode,
    ChainNode,
    CommandNode,
    ContinueNode,
    DotNode,
    FieldNode,
    IdentifierNode,
    ListNode,
    NilNode,
    Node,
    NumberNode,
    PipeNode,
    StringNode,
    TemplateNode,
    TemplateParseError,
    TextNode,
    VariableNode,
    go_unquote,
    parse_trees,
)

__all__ = ["BUILTIN_FUNCS", "MISSING", "FuncError", "GoFunc", "GoStruct", "Template", "TemplateExecError",
           "TemplateParseError", "go_unquote", "parse", "truth"]


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
    defines: dict[str, ListNode] = field(default_factory=dict)

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
    root, defines = parse_trees(text, name, {*BUILTIN_FUNCS, *funcs})
    return Template(name, text, root, defines)


class _State:
    def __init__(self, tmpl: Template, funcs: Mapping[str, GoFunc]) -> None:
        self.tmpl = tmpl
        self.funcs = {**BUILTIN_FUNCS, **funcs}
        self.vars: list[tuple[str, Any]] = []
        self.node: Node | None = None
        self.out: list[str] = []

    def at(self, node: Node) -> None:
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
    def walk(self, dot: Any, node: Node) -> None:
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
        elif isinstance(node, TemplateNode):
            body = self.tmpl.defines.get(node.name)
            if body is None:
                raise self.errorf(f'template "{node.name}" not defined')
            value = MISSING if node.pipe is None else self.eval_pipeline(dot, node.pipe)
            saved_vars, self.vars = self.vars, [("$", value)]
            try:
                self.walk(value, body)
            finally:
                self.vars = saved_vars
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

    def print_value(self, node: Node, value: Any) -> None:
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

    def not_a_function(self, args: list[Node], final: Any) -> None:
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
        is_hex_int = text[:2] in ("0x", "0X") and len(text) > 2 and not any(c in text for c in "pP")  # Go's isHexInt
        if node.is_float and not is_hex_int and not node.is_char and any(c in text for c in ".eEpP"):
            return node.float_value
        if node.is_int:
            return node.int_value
        raise self.errorf(f"{text} overflows int")

    def eval_chain(self, dot: Any, chain: ChainNode, args: list[Node], final: Any) -> Any:
        self.at(chain)
        if isinstance(chain.node, NilNode):
            raise self.errorf(f"indirection through explicit nil in {chain}")
        receiver = self.eval_arg(dot, None, chain.node)
        return self.eval_field_chain(dot, receiver, chain, chain.fields, args, final)

    def eval_variable(self, dot: Any, var: VariableNode, args: list[Node] | None, final: Any) -> Any:
        self.at(var)
        value = self.var_value(var.ident[0])
        if len(var.ident) == 1:
            self.not_a_function(args or [var], final)
            return value
        return self.eval_field_chain(dot, value, var, var.ident[1:], args, final)

    def eval_field_chain(self, dot: Any, receiver: Any, node: Node, ident: list[str],
                         args: list[Node] | None, final: Any) -> Any:
        for name in ident[:-1]:
            receiver = self.eval_field(name, None, _NO_FINAL, receiver)
        return self.eval_field(ident[-1], args, final, receiver)

    def eval_field(self, name: str, args: list[Node] | None, final: Any, receiver: Any) -> Any:
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

    def eval_function(self, dot: Any, ident: IdentifierNode, cmd: Node, args: list[Node] | None,
                      final: Any) -> Any:
        self.at(ident)
        func = self.funcs.get(ident.name)
        if func is None:
            raise self.errorf(f'"{ident.name}" is not a defined function')
        return self.eval_call(dot, func, cmd, ident.name, args, final)

    def eval_call(self, dot: Any, func: GoFunc, node: Node, name: str, args: list[Node] | None,
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

    def eval_arg(self, dot: Any, typ: str | None, node: Node) -> Any:
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


_JS_ESCAPES = {"\\": "\\\\", "'": "\\'", '"': '\\"', "<": "\\u003C", ">": "\\u003E", "&": "\\u0026",
               "=": "\\u003D"}


def _js_escape(text: str) -> str:
    return "".join(_JS_ESCAPES.get(ch) or (f"\\u{ord(ch):04X}" if ord(ch) < 0x20 else ch) for ch in text)


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
