"""SQL filter conditions and SQL rule actions, compiled once into Python functions.

`compile_condition` and `compile_action` parse the text, check it (names of system properties,
parameters, functions, the kinds of constant operands) and return functions of one message that
never parse again. Both are cached on the text and the parameters, so compiling the same rule for
many subscriptions costs one parse.

Constant parts are computed at compile time: `1=1` compiles to a condition whose `constant` is
True, so the rules of a subscription know it needs no message properties.
"""
from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from lark import Token, Tree

from ..clock import MAX_DURATION_SECONDS
from ..errors import InvalidArgumentError, RuleSyntaxError
from . import values
from .grammar import parse, syntax_error
from .properties import (MISSING, SETTABLE_NAMES, SYSTEM_NAMES, SYSTEM_PROPERTIES, MessageView, SystemProperty,
                         system_reader)
from .values import FilterEvaluationError, describe, kind_of

FILTER = "SQL filter"
ACTION = "SQL rule action"
MAX_TEXT_LENGTH = 1024
"""The longest SQL filter or action text, in characters (the Service Bus quota)."""
_INT_LIMIT = 1 << 63
_CONDITION_KINDS = frozenset({None, "bool", "null"})
_BOUNDED_IDS = frozenset({"message_id", "session_id"})
_MAX_ID_LENGTH = 128

Evaluate = Callable[[MessageView], Any]
Step = Callable[[MessageView, dict, dict], None]
Action = Callable[[Mapping[str, Any], Mapping[str, Any]], dict]
"""A compiled rule action: (wire, system) -> a new wire dict with the action applied."""


@dataclass(frozen=True)
class Condition:
    """A compiled filter condition.

    `evaluate(view)` gives True, False or None (unknown); a message matches only on True.
    `constant` is the match result when it does not depend on the message, else None.
    """

    evaluate: Callable[[MessageView], bool | None]
    constant: bool | None


def normalize_parameters(parameters: Mapping[str, Any] | None, owner: str) -> dict[str, Any]:
    """The parameters by lower-case name without the leading "@"; InvalidArgumentError if malformed.

    `{"@Color": "red"}` and `{"color": "red"}` both define `@color` (names are case-insensitive).
    """
    if parameters is None:
        return {}
    if not isinstance(parameters, Mapping):
        raise InvalidArgumentError(
            f"{owner} parameters must be a dict of name to value, not {type(parameters).__name__}")
    normalized: dict[str, Any] = {}
    for key, value in parameters.items():
        if not isinstance(key, str) or not key.lstrip("@"):
            raise InvalidArgumentError(
                f"{owner} parameter names must be non-empty strings such as '@color', not {key!r}")
        if not values.is_parameter_value(value):
            raise InvalidArgumentError(
                f"{owner} parameter {key!r} is {describe(value)}; parameters take {values.PARAMETER_TYPES_TEXT}")
        name = key.lstrip("@").lower()
        if name in normalized:
            raise InvalidArgumentError(f"{owner} parameter @{name} is given twice (names ignore case and a leading @)")
        normalized[name] = value
    return normalized


def compile_condition(text: str, parameters: Mapping[str, Any] | None = None) -> Condition:
    """Compile a SQL filter condition; RuleSyntaxError when it cannot be parsed or checked."""
    _check_length(text, FILTER)
    return _compile_condition(text, _cache_key(normalize_parameters(parameters, "SqlFilter")))


def compile_action(text: str, parameters: Mapping[str, Any] | None = None) -> Action:
    """Compile a SQL rule action; RuleSyntaxError when it cannot be parsed or checked.

    The result applies the statements in order to a copy of the wire dict it is given; the input
    is never changed.
    """
    _check_length(text, ACTION)
    return _compile_action(text, _cache_key(normalize_parameters(parameters, "SqlRuleAction")))


def _check_length(text: str, what: str) -> None:
    if len(text) > MAX_TEXT_LENGTH:
        raise InvalidArgumentError(
            f"the {what} is {len(text)} characters long; the limit is {MAX_TEXT_LENGTH}: split it over several rules "
            "or use IN (...) for long lists of values")


def _cache_key(parameters: dict[str, Any]) -> tuple[tuple[str, str, Any], ...]:
    return tuple(sorted((name, type(value).__name__, value) for name, value in parameters.items()))


@functools.lru_cache(maxsize=1024)
def _compile_condition(text: str, key: tuple[tuple[str, str, Any], ...]) -> Condition:
    compiler = _Compiler(text, FILTER, {name: value for name, _, value in key})
    tree = parse(text, "condition", FILTER)
    try:
        node = compiler.condition_operand(tree.children[0])
    except RecursionError:
        raise compiler.fail(tree, "the expression nests too deeply; write it with fewer nested operators") from None
    if node.constant:
        return Condition(node.evaluate, node.value is True)
    return Condition(node.evaluate, None)


@functools.lru_cache(maxsize=1024)
def _compile_action(text: str, key: tuple[tuple[str, str, Any], ...]) -> Action:
    compiler = _Compiler(text, ACTION, {name: value for name, _, value in key})
    tree = parse(text, "statements", ACTION)
    try:
        steps = tuple(compiler.statement(statement) for statement in tree.children)
    except RecursionError:
        raise compiler.fail(tree, "the expression nests too deeply; write it with fewer nested operators") from None

    def apply(wire: Mapping[str, Any], system: Mapping[str, Any]) -> dict:
        copy = dict(wire)
        props = dict(wire.get("application_properties") or ())
        copy["application_properties"] = props
        view = MessageView(copy, system)
        view.props = props
        for step in steps:
            step(view, copy, props)
        return copy

    return apply


@dataclass(frozen=True)
class _Node:
    """A compiled expression: its function, its kind when known before run time, its constant value."""

    evaluate: Evaluate
    kind: str | None = None
    constant: bool = False
    value: Any = None


def _constant(value: Any) -> _Node:
    return _Node(lambda view: value, kind_of(value), True, value)


@dataclass(frozen=True)
class _Reference:
    """A property named in the text: a user property, or a system property when `system` is set."""

    name: str
    system: SystemProperty | None = None

    @property
    def folded(self) -> str:
        return self.name.lower()

    def __str__(self) -> str:
        return f"sys.{self.system.name}" if self.system else f"user.{self.name}"


def _not(value: Any) -> bool | None:
    return False if value is True else True if value is False else None


def _and(left: Any, right: Any) -> bool | None:
    if left is False or right is False:
        return False
    return True if left is True and right is True else None


def _or(left: Any, right: Any) -> bool | None:
    if left is True or right is True:
        return True
    return False if left is False and right is False else None


def _member(value: Any, items: Iterable[Any]) -> bool | None:
    """`value IN (items)`: the OR of `value = item` over the items."""
    if value is None:
        return None
    unknown = False
    for item in items:
        result = values.equal(value, item)
        if result is True:
            return True
        if result is None:
            unknown = True
    return None if unknown else False


def _position(item: Tree | Token) -> tuple[int, int]:
    if isinstance(item, Token):
        return item.line or 1, item.column or 1
    if not item.meta.empty:
        return item.meta.line, item.meta.column
    for child in item.children:
        if isinstance(child, (Tree, Token)):
            return _position(child)
    return 1, 1


class _Compiler:
    """Turns the parse tree of one text into functions; checks what can be checked before run time."""

    def __init__(self, text: str, what: str, parameters: dict[str, Any]) -> None:
        self.text = text
        self.what = what
        self.parameters = parameters

    def fail(self, item: Tree | Token, problem: str) -> RuleSyntaxError:
        line, column = _position(item)
        return syntax_error(self.what, self.text, line, column, problem)

    def expression(self, tree: Tree) -> _Node:
        return getattr(self, f"_{tree.data}")(tree)

    def condition_operand(self, tree: Tree) -> _Node:
        node = self.expression(tree)
        if node.kind not in _CONDITION_KINDS:
            raise self.fail(tree, f"expected a condition (a comparison, IS NULL, IN, LIKE, EXISTS, TRUE or FALSE), "
                                  f"found an expression that gives {values.KIND_NAMES[node.kind]}")
        return node

    def _apply(self, function: Callable[..., Any], kind: str | None, *nodes: _Node) -> _Node:
        """A node computing `function` of the nodes' values, folded when they are all constant."""
        if all(node.constant for node in nodes):
            try:
                return _constant(function(*(node.value for node in nodes)))
            except FilterEvaluationError:
                pass
        if len(nodes) == 1:
            only = nodes[0].evaluate
            return _Node(lambda view: function(only(view)), kind)
        if len(nodes) == 2:
            left, right = nodes
            if right.constant:
                first, fixed = left.evaluate, right.value
                return _Node(lambda view: function(first(view), fixed), kind)
            first, second = left.evaluate, right.evaluate
            return _Node(lambda view: function(first(view), second(view)), kind)
        evaluates = tuple(node.evaluate for node in nodes)
        return _Node(lambda view: function(*(evaluate(view) for evaluate in evaluates)), kind)

    def _literal(self, tree: Tree) -> _Node:
        token: Token = tree.children[0]
        if token.type == "STRING":
            return _constant(token[1:-1].replace("''", "'"))
        if token.type == "NUMBER":
            if token.isdigit():
                number = int(token)
                if number > _INT_LIMIT:
                    raise self.fail(token, f"the integer {token} does not fit in 64 bits; write it as a decimal "
                                           f"({token}.0) to use a floating-point number")
                return _constant(number)
            return _constant(float(token))
        return _constant({"TRUE": True, "FALSE": False, "NULL": None}[token.type])

    def _parameter(self, tree: Tree) -> _Node:
        token: Token = tree.children[0]
        name = token[1:].lower()
        if name not in self.parameters:
            known = ", ".join(f"@{key}" for key in sorted(self.parameters)) or "none"
            raise self.fail(token, f"unknown parameter {token}; pass it in parameters, e.g. "
                                   f"{{'{token}': value}} (parameters given: {known})")
        return _constant(self.parameters[name])

    def reference(self, tree: Tree) -> _Reference:
        """The property a property tree names; RuleSyntaxError for an unknown scope or system property."""
        if tree.data == "bare_property":
            return _Reference(self._name(tree.children[0]))
        scope, part = tree.children
        name = self._name(part)
        if scope.lower() == "user":
            return _Reference(name)
        if scope.lower() != "sys":
            raise self.fail(scope, f'unknown scope "{scope}"; write sys.{name} for a system property or '
                                   f"user.{name} for an application property")
        prop = SYSTEM_PROPERTIES.get(name.lower())
        if prop is None:
            raise self.fail(part, f"unknown system property sys.{name}; the system properties are {SYSTEM_NAMES}")
        return _Reference(prop.name, prop)

    def _name(self, part: Tree) -> str:
        token: Token = part.children[0]
        if token.type == "BRACKETED":
            name = token[1:-1].replace("]]", "]")
        elif token.type == "QUOTED":
            name = token[1:-1].replace('""', '"')
        else:
            name = str(token)
        if not name:
            raise self.fail(token, "a property name cannot be empty")
        return name

    def _bare_property(self, tree: Tree) -> _Node:
        return _Node(_reader(self.reference(tree)))

    _scoped_property = _bare_property

    def _exists(self, tree: Tree) -> _Node:
        ref = self.reference(tree.children[0])
        if ref.system is not None:
            read = system_reader(ref.system)
            return _Node(lambda view: read(view) is not None, "bool")
        name, folded = ref.name, ref.folded
        return _Node(lambda view: view.user(name, folded) is not MISSING, "bool")

    def _function(self, tree: Tree) -> _Node:
        name_token, arguments = tree.children
        name = name_token.lower()
        args = [] if arguments is None else arguments.children
        if name == "newid":
            if args:
                raise self.fail(tree, "newid() takes no arguments")
            return _Node(lambda view: str(uuid.uuid4()), "string")
        if name not in ("property", "p"):
            raise self.fail(name_token, f"unknown function {name_token}(); the functions are newid(), "
                                        "property(name) and p(name)")
        if len(args) != 1:
            raise self.fail(tree, f"{name_token}() takes one argument, the property name, e.g. "
                                  f"{name_token}('user.color')")
        argument = self.expression(args[0])
        if argument.constant:
            if argument.value is None:
                return _constant(None)
            if type(argument.value) is not str:
                raise self.fail(args[0], f"{name_token}() takes the property name as a string, not "
                                         f"{describe(argument.value)}")
            try:
                return _Node(_reader(_named(argument.value)))
            except FilterEvaluationError as exc:
                raise self.fail(args[0], exc.description) from None
        evaluate = argument.evaluate

        def read_named(view: MessageView) -> Any:
            text = evaluate(view)
            if text is None:
                return None
            if type(text) is not str:
                raise FilterEvaluationError(f"{name_token}() takes the property name as a string, not {describe(text)}")
            return _reader(_named(text))(view)

        return _Node(read_named)

    def _compare(self, tree: Tree) -> _Node:
        left, operator, right = tree.children
        return self._apply(values.comparison(str(operator.children[0])), "bool",
                           self.expression(left), self.expression(right))

    def _is_null(self, tree: Tree) -> _Node:
        return self._apply(lambda value: value is None, "bool", self.expression(tree.children[0]))

    def _is_not_null(self, tree: Tree) -> _Node:
        return self._apply(lambda value: value is not None, "bool", self.expression(tree.children[0]))

    def _in_(self, tree: Tree) -> _Node:
        node = self.expression(tree.children[0])
        items = [self.expression(item) for item in tree.children[1].children]
        if all(item.constant for item in items):
            constants = tuple(item.value for item in items)
            if node.constant:
                return _constant(_member(node.value, constants))
            evaluate = node.evaluate
            if all(type(value) is str for value in constants):
                strings = frozenset(constants)

                def member_of_strings(view: MessageView) -> bool | None:
                    value = evaluate(view)
                    if type(value) is str:
                        return value in strings
                    return _member(value, constants)

                return _Node(member_of_strings, "bool")
            return _Node(lambda view: _member(evaluate(view), constants), "bool")
        evaluates = tuple(item.evaluate for item in items)
        evaluate = node.evaluate
        return _Node(lambda view: _member(evaluate(view), [item(view) for item in evaluates]), "bool")

    def _not_in(self, tree: Tree) -> _Node:
        return self._apply(_not, "bool", self._in_(tree))

    def _like(self, tree: Tree) -> _Node:
        subject_tree, pattern_tree, escape_tree = tree.children
        subject, pattern = self.expression(subject_tree), self.expression(pattern_tree)
        escape = _constant(None) if escape_tree is None else self.expression(escape_tree)
        if pattern.constant and pattern.value is not None and type(pattern.value) is not str:
            raise self.fail(pattern_tree, f"the LIKE pattern must be a string, not {describe(pattern.value)}")
        if escape.constant and escape_tree is not None and (
                type(escape.value) is not str or len(escape.value) != 1):
            raise self.fail(escape_tree, f"the ESCAPE character must be one character, such as '!', not "
                                         f"{describe(escape.value)}")
        if not (pattern.constant and type(pattern.value) is str and escape.constant):
            return self._apply(values.like, "bool", subject, pattern, escape)
        try:
            regex = values.like_pattern(pattern.value, escape.value)
        except FilterEvaluationError as exc:
            raise self.fail(pattern_tree, exc.description) from None

        def matches(value: Any) -> bool | None:
            return None if type(value) is not str else regex.fullmatch(value) is not None

        return self._apply(matches, "bool", subject)

    def _not_like(self, tree: Tree) -> _Node:
        return self._apply(_not, "bool", self._like(tree))

    def _arithmetic(self, tree: Tree) -> _Node:
        left_tree, operator, right_tree = tree.children
        left, right = self.expression(left_tree), self.expression(right_tree)
        kind = None
        if left.kind == right.kind == "number":
            kind = "number"
        elif left.kind == right.kind == "string" and operator == "+":
            kind = "string"
        return self._apply(values.arithmetic(str(operator)), kind, left, right)

    def _sign(self, tree: Tree) -> _Node:
        operator, operand_tree = tree.children
        operand = self.expression(operand_tree)
        kind = "number" if operand.kind == "number" else None
        return self._apply(values.negate if operator == "-" else values.positive, kind, operand)

    def _not_(self, tree: Tree) -> _Node:
        return self._apply(_not, "bool", self.condition_operand(tree.children[0]))

    def _and_(self, tree: Tree) -> _Node:
        left, right = (self.condition_operand(child) for child in tree.children)
        if left.constant and right.constant:
            return _constant(_and(left.value, right.value))
        first, second = left.evaluate, right.evaluate

        def both(view: MessageView) -> bool | None:
            value = first(view)
            if value is False:
                return False
            other = second(view)
            if other is False:
                return False
            return True if value is True and other is True else None

        return _Node(both, "bool")

    def _or_(self, tree: Tree) -> _Node:
        left, right = (self.condition_operand(child) for child in tree.children)
        if left.constant and right.constant:
            return _constant(_or(left.value, right.value))
        first, second = left.evaluate, right.evaluate

        def either(view: MessageView) -> bool | None:
            value = first(view)
            if value is True:
                return True
            other = second(view)
            if other is True:
                return True
            return False if value is False and other is False else None

        return _Node(either, "bool")

    def statement(self, tree: Tree) -> Step:
        """One SET or REMOVE statement as a function of (view, wire copy, properties copy)."""
        ref = self.reference(tree.children[0])
        prop = ref.system
        if prop is not None and prop.settable is None:
            raise self.fail(tree.children[0], f"{ref} cannot be changed by a rule action; the system properties "
                                              f"an action can SET or REMOVE are {SETTABLE_NAMES}")
        if tree.data == "remove_statement":
            return _remove_system(prop.key) if prop is not None else _remove_user(ref.name)
        value_tree = tree.children[2]
        node = self.expression(value_tree)
        if prop is None:
            return _set_user(ref.name, node.evaluate)
        wanted = "string" if prop.settable == "text" else "number"
        if node.kind not in (None, "null", wanted):
            raise self.fail(value_tree, f"{ref} takes {values.KIND_NAMES[wanted]}, not an expression that gives "
                                        f"{values.KIND_NAMES[node.kind]}")
        setter = _set_text if prop.settable == "text" else _set_seconds
        return setter(prop, node.evaluate)


def _reader(ref: _Reference) -> Evaluate:
    if ref.system is not None:
        return system_reader(ref.system)
    name, folded = ref.name, ref.folded

    def read_user(view: MessageView) -> Any:
        value = view.props.get(name, MISSING)
        if value is MISSING:
            value = view.user(name, folded)
            if value is MISSING:
                return None
        return value

    return read_user


def _named(text: str) -> _Reference:
    """The property a `property()` argument names: "sys.Label", "user.color" or "color"."""
    scope, _, rest = text.partition(".")
    if rest and scope.lower() == "sys":
        prop = SYSTEM_PROPERTIES.get(rest.lower())
        if prop is None:
            raise FilterEvaluationError(f"unknown system property sys.{rest}; the system properties are {SYSTEM_NAMES}")
        return _Reference(prop.name, prop)
    if rest and scope.lower() == "user":
        return _Reference(rest)
    return _Reference(text)


def _drop_user(props: dict, name: str) -> None:
    folded = name.lower()
    for key in [key for key in props if key.lower() == folded]:
        del props[key]


def _set_user(name: str, evaluate: Evaluate) -> Step:
    target = f"user.{name}"

    def set_user(view: MessageView, wire: dict, props: dict) -> None:
        value = values.check_property_value(evaluate(view), target)
        _drop_user(props, name)
        props[name] = value
        view.properties_changed()

    return set_user


def _remove_user(name: str) -> Step:
    def remove_user(view: MessageView, wire: dict, props: dict) -> None:
        _drop_user(props, name)
        view.properties_changed()

    return remove_user


def _remove_system(key: str) -> Step:
    def remove_system(view: MessageView, wire: dict, props: dict) -> None:
        wire.pop(key, None)

    return remove_system


def _set_text(prop: SystemProperty, evaluate: Evaluate) -> Step:
    key = prop.key

    def set_text(view: MessageView, wire: dict, props: dict) -> None:
        value = evaluate(view)
        if value is None:
            wire.pop(key, None)
            return
        if type(value) is not str:
            raise FilterEvaluationError(f"sys.{prop.name} takes a string, not {describe(value)}")
        if key in _BOUNDED_IDS and not 0 < len(value) <= _MAX_ID_LENGTH:
            raise FilterEvaluationError(
                f"sys.{prop.name} must be 1 to {_MAX_ID_LENGTH} characters long, not {len(value)}")
        wire[key] = value
        if key == "session_id" and wire.get("partition_key") is not None:
            wire["partition_key"] = value

    return set_text


def _set_seconds(prop: SystemProperty, evaluate: Evaluate) -> Step:
    key = prop.key

    def set_seconds(view: MessageView, wire: dict, props: dict) -> None:
        value = evaluate(view)
        if value is None:
            wire.pop(key, None)
            return
        if type(value) not in (int, float) or not 0 < value <= MAX_DURATION_SECONDS:
            raise FilterEvaluationError(
                f"sys.{prop.name} takes a number of seconds above 0 and at most {MAX_DURATION_SECONDS:.0f}, "
                f"not {describe(value)}")
        wire[key] = float(value)

    return set_seconds
