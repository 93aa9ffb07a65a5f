"""The grammar of SQL filters and SQL rule actions, and the parser that reads them.

`parse` returns a lark parse tree, or raises `RuleSyntaxError` naming the line and column
(1-based) of the first problem and what was expected there.
"""
from __future__ import annotations

import functools

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from ..errors import RuleSyntaxError

GRAMMAR = r"""
condition: expr

statements: (statement _SEMI*)+
?statement: _SET property EQ sum         -> set_statement
          | _REMOVE property             -> remove_statement

?expr: or_expr
?or_expr: and_expr
        | or_expr _OR and_expr           -> or_
?and_expr: not_expr
         | and_expr _AND not_expr        -> and_
?not_expr: comparison
         | _NOT not_expr                 -> not_
?comparison: sum
           | sum compare_op sum          -> compare
           | sum _IS NULL                -> is_null
           | sum _IS _NOT NULL           -> is_not_null
           | sum _IN "(" expr_list ")"   -> in_
           | sum _NOT _IN "(" expr_list ")" -> not_in
           | sum _LIKE sum [_ESCAPE sum] -> like
           | sum _NOT _LIKE sum [_ESCAPE sum] -> not_like
compare_op: EQ | NE | GT | GE | LT | LE
?sum: product
    | sum ADD_OP product                 -> arithmetic
?product: unary
        | product MUL_OP unary           -> arithmetic
?unary: atom
      | ADD_OP unary                     -> sign
?atom: literal
     | property
     | PARAMETER                         -> parameter
     | NAME "(" [expr_list] ")"          -> function
     | _EXISTS "(" property ")"          -> exists
     | _EXISTS property                  -> exists
     | "(" expr ")"
expr_list: expr ("," expr)*
literal: NUMBER | STRING | TRUE | FALSE | NULL
property: name_part                      -> bare_property
        | NAME "." name_part             -> scoped_property
name_part: NAME | BRACKETED | QUOTED

// Keywords are whole words: "orders" is a name, never OR followed by "ders". Priority 2 tries them
// before NAME, so a word that is exactly a keyword ("or", "NULL") reads as the keyword.
_AND.2: /and\b/i
_OR.2: /or\b/i
_NOT.2: /not\b/i
_IS.2: /is\b/i
_IN.2: /in\b/i
_LIKE.2: /like\b/i
_ESCAPE.2: /escape\b/i
_EXISTS.2: /exists\b/i
_SET.2: /set\b/i
_REMOVE.2: /remove\b/i
TRUE.2: /true\b/i
FALSE.2: /false\b/i
NULL.2: /null\b/i
EQ: "="
NE: "<>" | "!="
GT: ">"
GE: ">="
LT: "<"
LE: "<="
ADD_OP: "+" | "-"
MUL_OP: "*" | "/" | "%"
_SEMI: ";"
NAME: /[^\W\d]\w*/i
PARAMETER: /@[^\W\d]\w*/
NUMBER: /(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?/
STRING: /'(?:[^']|'')*'/
BRACKETED: /\[(?:[^\]]|\]\])*\]/
QUOTED: /"(?:[^"]|"")*"/
%ignore /\s+/
"""

_KEYWORDS = frozenset({
    "_AND", "_OR", "_NOT", "_IS", "_IN", "_LIKE", "_ESCAPE", "_EXISTS", "_SET", "_REMOVE", "TRUE", "FALSE", "NULL",
})
_OPERATORS = frozenset({"EQ", "NE", "GT", "GE", "LT", "LE", "ADD_OP", "MUL_OP", "_AND", "_OR", "_IS", "_IN", "_LIKE",
                        "_NOT"})
_READABLE = {
    "RPAR": '")"', "LPAR": '"("', "COMMA": '","', "DOT": '"."', "EQ": '"="', "_SEMI": '";"', "_SET": "SET",
    "_REMOVE": "REMOVE", "NULL": "NULL", "_IN": "IN", "_LIKE": "LIKE", "_NOT": "NOT", "_ESCAPE": "ESCAPE",
    "NAME": "a property name", "BRACKETED": "a property name", "QUOTED": "a property name",
}
_UNCLOSED = {"'": "a string that is not closed (write '' for a quote inside a string)",
             "[": "a bracketed name that is not closed with ]", '"': 'a quoted name that is not closed with "'}
_EMPTY_HINT = {"condition": "a condition such as \"sys.label = 'x'\", or use TrueFilter()",
               "statements": "statements such as \"SET user.tier = 'gold'; REMOVE user.tmp\""}


@functools.cache
def _parser() -> Lark:
    return Lark(GRAMMAR, parser="lalr", lexer="contextual", start=["condition", "statements"],
                propagate_positions=True, maybe_placeholders=True)


def parse(text: str, start: str, what: str) -> Tree:
    """Parse `text` from the rule `start` ("condition" or "statements").

    `what` names the text in error messages, e.g. "SQL filter".
    """
    if not text.strip():
        raise syntax_error(what, text, 1, 1, f"it is empty; write {_EMPTY_HINT[start]}")
    try:
        return _parser().parse(text, start=start)
    except UnexpectedInput as exc:
        line, column, problem = _describe(text, exc)
    raise syntax_error(what, text, line, column, problem)


def syntax_error(what: str, text: str, line: int, column: int, problem: str) -> RuleSyntaxError:
    """A RuleSyntaxError in the standard form: the expression, the position, the problem."""
    return RuleSyntaxError(f'cannot parse the {what} "{text}" at line {line}, column {column}: {problem}',
                           expression=text, line=line, column=column)


def _describe(text: str, exc: UnexpectedInput) -> tuple[int, int, str]:
    if isinstance(exc, UnexpectedCharacters):
        char = text[exc.pos_in_stream]
        return exc.line, exc.column, _UNCLOSED.get(char, f'unexpected character "{char}"')
    if not isinstance(exc, UnexpectedToken):
        return exc.line, exc.column, str(exc)
    token = exc.token
    expected = _expected(exc.interactive_parser.accepts())
    if token.type == "$END":
        last = _previous_token(text, len(text))
        if last is None:
            return 1, 1, f"expected {expected}"
        return last.end_line, last.end_column, f"expected {expected} after {_show(last)}"
    previous = _previous_token(text, token.start_pos)
    where = f" after {_show(previous)}" if previous is not None else ""
    return token.line, token.column, f"expected {expected}{where}, found {_show(token)}"


def _previous_token(text: str, position: int) -> Token | None:
    previous = None
    try:
        for token in _parser().lex(text):
            if token.end_pos is not None and token.end_pos > position:
                break
            previous = token
    except UnexpectedInput:
        pass
    return previous


def _expected(names: set[str]) -> str:
    if "NUMBER" in names:
        return "an expression"
    if names & {"ADD_OP", "_AND"}:
        parts = ["an operator"]
        names = names - _OPERATORS - {"LPAR", "DOT"}
    else:
        parts = []
    parts += sorted({_READABLE.get(name, name.lower()) for name in names if name != "$END"})
    if "$END" in names:
        parts.append("the end of the text")
    if len(parts) < 2:
        return parts[0] if parts else "nothing more"
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def _show(token: Token) -> str:
    if token.type in _KEYWORDS:
        return str(token).upper()
    return f'"{token}"'
